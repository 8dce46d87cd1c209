"""The browser client (web/) in headless Chromium against the real foldtabled.

Run: .venv/bin/python -m pytest Tests/browser -q
Needs Debian's chromium and chromium-driver, and a built foldtabled (or FOLDTABLE_BIN)."""
import os
import re
import signal
import time
import urllib.request

import pytest
from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import WebDriverWait

from conftest import Peer, Server, free_port, seed, snapshot

FRUIT = {"key": "fruit", "title": "Fruit", "detail": "3 kinds", "footer": "Fresh daily",
         "rows": [("apple", "Apple", "red"), ("pear", "Pear", "green"), ("plum", "Plum", "")]}
VEG = {"key": "veg", "title": "Vegetables", "rows": [("kale", "Kale", ""), ("leek", "Leek", "")]}
NUTS = {"key": "nuts", "title": "Nuts", "collapsed": True, "rows": [("pecan", "Pecan", "")]}


def wait(b, cond, timeout=5, poll=0.05):
    """WebDriverWait whose condition may hit a node the page just replaced."""
    return WebDriverWait(b, timeout, poll_frequency=poll, ignored_exceptions=[StaleElementReferenceException]).until(cond)


# Resolves once `el` has kept the same box for two frames and nothing that ends is animating in
# the document or in any shadow root on the page (rows sliding in or out; a spinner runs forever
# and does not count), or after 3 s. WebDriver finds an element's centre first and clicks there a
# moment later: while a section above folds, that point can already be a row of another section.
STILL = """
const [el, done] = [arguments[0], arguments[arguments.length - 1]];
const roots = () => [document, ...[...document.querySelectorAll('*')].map((e) => e.shadowRoot).filter(Boolean)];
const moving = () => roots().some((r) => r.getAnimations().some((a) =>
  a.playState === 'running' && a.effect && a.effect.getComputedTiming().endTime !== Infinity));
const box = () => { const r = el.getBoundingClientRect(); return [r.x, r.y, r.width, r.height].join(); };
const until = performance.now() + 3000;
let last = null, same = 0;
const frame = () => {
  const now = box();
  same = now === last && !moving() ? same + 1 : 0;
  last = now;
  if (same >= 2 || performance.now() > until) done(same >= 2);
  else requestAnimationFrame(frame);
};
requestAnimationFrame(frame);
"""


def click_still(b, el):
    """Clicks `el` once the page around it has stopped moving (see STILL)."""
    b.execute_async_script(STILL, el)
    el.click()


def edit_mode(b):
    """Switches edit mode on and waits until the sections' edit tools are drawn (the page draws
    on its next frame, not in the click)."""
    b.find_element(By.ID, "edit").click()
    wait(b, lambda b: b.find_elements(By.CSS_SELECTOR, ".sec .tools textarea"))


def press(b, key, timeout=5):
    """Clicks a section header once nothing moves it, retrying while something covers it for a moment."""
    def attempt(b):
        click_still(b, head(b, key))
        return True
    WebDriverWait(b, timeout, poll_frequency=0.05,
                  ignored_exceptions=[StaleElementReferenceException, ElementClickInterceptedException]).until(attempt)


def open_as(b, server, name, path):
    b.get(server.url + "/")
    b.execute_script("localStorage.setItem('foldtable.name', arguments[0])", name)
    b.get(server.url + path)
    if path.startswith("/s/"):
        wait(b, lambda b: "here:" in b.find_element(By.ID, "people").text, timeout=10)


def head(b, key):
    return b.find_element(By.CSS_SELECTOR, f'section[data-sec="{key}"] .toggle')


def expanded(b, key):
    return head(b, key).get_attribute("aria-expanded") == "true"


def value_of(b, row):
    """The row's value as the page shows it (text outside an edit)."""
    return b.find_element(By.CSS_SELECTOR, f'li[data-row="{row}"] .value')


def value_text(b, row):
    """What the row's value says: the open field's value while it is edited, else the text."""
    return b.execute_script(
        "const r = document.querySelector(`li[data-row=\"${arguments[0]}\"]`);"
        "const f = r.querySelector('.in-value'); return f ? f.value : r.querySelector('.value').textContent", row)


def edit_value(b, row, *keys):
    """Opens the row's value in place (a click, as a person would) and types `keys` into it."""
    value_of(b, row).click()
    field = wait(b, lambda b: b.find_element(By.CSS_SELECTOR, f'li[data-row="{row}"] .in-value'))
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.BACKSPACE, *keys)
    return field


def section_titles(b):
    return [e.text for e in b.find_elements(By.CSS_SELECTOR, ".sec .title")]


def test_lobby_lists_sessions_with_member_counts_and_joins_one_by_name(browsers, session_name):
    # A lobby never joins, so the server closes it at the join deadline: it must reopen quietly.
    server = Server(extra=["--join-timeout-ms", "1000"]).start()
    watcher = None
    try:
        seed(server, session_name, [FRUIT])
        watcher = Peer(server, session_name, name="watcher")  # one member, so the count is 1
        b = browsers()
        open_as(b, server, "ana", "/")
        wait(b, lambda b: any(session_name in li.text and "1 here" in li.text
                              for li in b.find_elements(By.CSS_SELECTOR, "#sessions li")))
        assert any("demo" in li.text for li in b.find_elements(By.CSS_SELECTOR, "#sessions li"))
        b.execute_script("""
            window.bannerSeen = false;
            new MutationObserver(() => { if (!banner.hidden) window.bannerSeen = true; })
              .observe(banner, {attributes: true});""")
        time.sleep(2.5)  # nothing to wait for: two join deadlines pass
        assert b.execute_script("return window.bannerSeen") is False
        assert b.find_element(By.ID, "name").get_attribute("value") == "ana"
        b.find_element(By.ID, "session-name").send_keys(session_name, Keys.ENTER)
        wait(b, lambda b: b.current_url.endswith(f"/s/{session_name}"))
        wait(b, lambda b: section_titles(b) == ["Fruit"])
        wait(b, lambda b: "2 here" in b.find_element(By.ID, "people").text)
    finally:
        if watcher:
            watcher.close()
        server.stop()


def test_demo_session_shows_titles_details_counts_indicators_and_footers(server, browsers):
    b = browsers()
    open_as(b, server, "ana", "/s/demo")
    wait(b, lambda b: len(b.find_elements(By.CSS_SELECTOR, ".sec")) >= 3)
    table = snapshot(server, "demo")
    opts = table["options"]
    for s in table["sections"]:
        h = head(b, s["key"])
        assert h.find_element(By.CSS_SELECTOR, ".title").text.split() == s["title"].split()
        assert h.get_attribute("aria-expanded") == ("false" if s["collapsed"] else "true")
        ind = h.find_element(By.CSS_SELECTOR, ".ind").get_attribute("textContent")
        assert ind == (opts["collapsedIndicator"] if s["collapsed"] else opts["expandedIndicator"])
        # One count per header: the row count, unless the detail already says it ("4 models").
        count = h.find_element(By.CSS_SELECTOR, ".count")
        said = str(s["rowCount"]) in re.findall(r"\d+", (s.get("detail") or "").replace(",", ""))
        assert count.is_displayed() != said
        if not said:
            assert f"{s['rowCount']:,} row" in count.text
        if s.get("detail"):
            assert h.find_element(By.CSS_SELECTOR, ".detail").text == s["detail"]
        controls = b.find_element(By.ID, h.get_attribute("aria-controls"))
        foot = controls.find_element(By.CSS_SELECTOR, ".foot")
        assert foot.is_displayed() == bool(s.get("footer") and not s["collapsed"])
    out = os.environ.get("FOLDTABLE_SCREENSHOT_OUT")
    if out:
        b.execute_script("document.activeElement.blur()")
        b.save_screenshot(out)


CLICKED_AT = """
    // The time of the page's latest click, in milliseconds since the epoch (window.clickedAt).
    window.clickedAt = null;
    document.addEventListener('click', () => { window.clickedAt = Date.now(); }, {capture: true});
"""

SHOWN_AT = """
    // The time, in milliseconds since the epoch, at which every section of arguments[0]
    // ({key: expanded}) first shows that state (window.shownAt), checked on every change.
    const want = Object.entries(arguments[0]);
    const shown = () => want.every(([key, open]) => {
      const toggle = document.querySelector(`section[data-sec="${key}"] .toggle`);
      return toggle !== null && toggle.getAttribute('aria-expanded') === String(open);
    });
    window.shownAt = null;
    new MutationObserver(() => { if (window.shownAt === null && shown()) window.shownAt = Date.now(); })
      .observe(document.body, {subtree: true, childList: true, attributes: true});
"""


def shown_within_a_second(clicker, click, watcher, want):
    """`click(clicker)`, then `watcher` shows `want` ({section: expanded}) within a second of
    the click, by the pages' own clocks (one system clock): how long WebDriver itself takes to
    click and to look (a lot on a loaded machine) does not count, only the server and the pages."""
    watcher.execute_script(SHOWN_AT, want)
    click(clicker)
    wait(watcher, lambda w: w.execute_script("return window.shownAt") is not None, timeout=10)
    latency = watcher.execute_script("return window.shownAt") - clicker.execute_script("return window.clickedAt")
    assert latency < 1000, f"{want} shown {latency} ms after the click"


def test_toggle_in_one_window_appears_in_the_other_within_a_second(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    for page in (a, b):
        page.execute_script(CLICKED_AT)
    assert expanded(b, "fruit")
    shown_within_a_second(a, lambda a: press(a, "fruit"), b, {"fruit": False})
    # Who did it: a badge on the header and a polite announcement.
    wait(b, lambda b: "ana" in b.find_element(By.CSS_SELECTOR, 'section[data-sec="fruit"] .badges').text)
    wait(b, lambda b: "ana collapsed Fruit" in b.find_element(By.ID, "live").get_attribute("textContent"))
    # Rows slide out and the body is hidden in the other window too.
    wait(b, lambda b: not value_of(b, "apple").is_displayed())
    shown_within_a_second(b, lambda b: press(b, "fruit"), a, {"fruit": True})
    wait(a, lambda a: value_of(a, "apple").is_displayed())
    # Collapse all / expand all reach everyone.
    shown_within_a_second(a, lambda a: a.find_element(By.ID, "collapse-all").click(), b, {"fruit": False, "veg": False})
    shown_within_a_second(b, lambda b: b.find_element(By.ID, "expand-all").click(), a, {"fruit": True, "veg": True})


def test_accordion_option_keeps_one_section_open_for_everyone(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    a.find_element(By.ID, "accordion").click()
    wait(b, lambda b: b.find_element(By.ID, "accordion").is_selected())
    a.find_element(By.ID, "collapse-all").click()
    wait(a, lambda a: not expanded(a, "fruit") and not expanded(a, "veg"))
    press(a, "fruit")
    wait(b, lambda b: expanded(b, "fruit"))
    press(b, "veg")
    wait(a, lambda a: expanded(a, "veg") and not expanded(a, "fruit"))


def test_keyboard_only_toggling_works(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG, NUTS])
    b = browsers()
    open_as(b, server, "kim", f"/s/{session_name}")
    keys = ActionChains(b)
    # Tab from the top of the page to the first section header.
    b.execute_script("document.activeElement.blur()")
    for _ in range(30):
        keys.send_keys(Keys.TAB).perform()
        if b.switch_to.active_element.get_attribute("id") == head(b, "fruit").get_attribute("id"):
            break
    else:
        pytest.fail("Tab never reached the first section header")
    active_sec = lambda: b.execute_script("return document.activeElement.closest('section').dataset.sec")
    keys.send_keys(Keys.ENTER).perform()
    wait(b, lambda b: not expanded(b, "fruit"))
    keys.send_keys(Keys.ARROW_DOWN).perform()
    assert active_sec() == "veg"
    keys.send_keys(Keys.SPACE).perform()
    wait(b, lambda b: not expanded(b, "veg"))
    keys.send_keys(Keys.END).perform()
    assert active_sec() == "nuts"
    keys.send_keys(Keys.ENTER).perform()
    wait(b, lambda b: expanded(b, "nuts"))
    keys.send_keys(Keys.HOME).perform()
    assert active_sec() == "fruit"
    keys.send_keys(Keys.ARROW_UP).perform()  # stays on the first
    assert active_sec() == "fruit"
    # The server has it, not just this page.
    def server_state():
        return {s["key"]: s["collapsed"] for s in snapshot(server, session_name)["sections"]}
    wait(b, lambda b: server_state() == {"fruit": True, "veg": True, "nuts": False})
    # Focus is visible on the header.
    outline = b.execute_script("return getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")


def test_editing_a_value_propagates(server, browsers, session_name):
    seed(server, session_name, [FRUIT])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    # Values go out while the person types, before the edit is closed.
    edit_value(a, "apple", "golden delicious")
    wait(b, lambda b: value_text(b, "apple") == "golden delicious")
    wait(a, lambda a: any(r["key"] == "apple" and r["value"] == "golden delicious"
                          for s in snapshot(server, session_name)["sections"] for r in s.get("rows", [])))
    # A remote edit while the other person has the field open but is not typing shows up too.
    value_of(b, "pear").click()
    wait(b, lambda b: b.find_elements(By.CSS_SELECTOR, 'li[data-row="pear"] .in-value'))
    edit_value(a, "pear", "conference", Keys.TAB)
    wait(b, lambda b: value_text(b, "pear") == "conference")
    # Closed with Enter, the edit reads as text again, also in the editor's own window.
    edit_value(a, "plum", "damson", Keys.ENTER)
    wait(a, lambda a: not a.find_elements(By.CSS_SELECTOR, 'li[data-row="plum"] .in-value')
         and value_of(a, "plum").text == "damson")
    wait(b, lambda b: value_text(b, "plum") == "damson")


def test_adding_renaming_moving_and_removing_sections_and_rows_reach_the_other_window(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    a.find_element(By.ID, "edit").click()
    a.find_element(By.ID, "new-section-title").send_keys("Herbs", Keys.ENTER)
    wait(b, lambda b: section_titles(b) == ["Fruit", "Vegetables", "Herbs"])
    # Rename a section.
    t = a.find_element(By.CSS_SELECTOR, 'section[data-sec="veg"] .in-title')
    t.clear()
    t.send_keys("Greens", Keys.ENTER)
    wait(b, lambda b: section_titles(b) == ["Fruit", "Greens", "Herbs"])
    # Move it up.
    a.find_element(By.CSS_SELECTOR, 'section[data-sec="veg"] [data-act="up"]').click()
    wait(b, lambda b: section_titles(b) == ["Greens", "Fruit", "Herbs"])
    # Add a row to Fruit, rename it, move it to the top, then remove a row.
    a.find_element(By.CSS_SELECTOR, 'section[data-sec="fruit"] [data-act="addrow"]').click()
    labels = lambda b: [e.get_attribute("textContent") for e in
                        b.find_elements(By.CSS_SELECTOR, 'section[data-sec="fruit"] li.row:not(.leave) .label')]
    wait(b, lambda b: labels(b) == ["Apple", "Pear", "Plum", "New row"])
    new = a.find_elements(By.CSS_SELECTOR, 'section[data-sec="fruit"] li.row .in-label')[-1]
    new.clear()
    new.send_keys("Quince", Keys.ENTER)
    wait(b, lambda b: labels(b) == ["Apple", "Pear", "Plum", "Quince"])
    for _ in range(3):
        before = labels(b)
        a.find_elements(By.CSS_SELECTOR, 'section[data-sec="fruit"] li.row:not(.leave) [data-act="rup"]')[
            before.index("Quince")].click()
        wait(b, lambda b: labels(b) != before)
    wait(b, lambda b: labels(b) == ["Quince", "Apple", "Pear", "Plum"])
    a.find_element(By.CSS_SELECTOR, 'li[data-row="pear"] [data-act="rremove"]').click()
    wait(b, lambda b: labels(b) == ["Quince", "Apple", "Plum"])
    # Remove a section.
    herbs = [s["key"] for s in snapshot(server, session_name)["sections"] if s["title"] == "Herbs"][0]
    a.find_element(By.CSS_SELECTOR, f'section[data-sec="{herbs}"] [data-act="remove"]').click()
    wait(b, lambda b: section_titles(b) == ["Greens", "Fruit"])


def test_find_reveals_a_row_in_a_collapsed_section(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    press(a, "veg")
    wait(a, lambda a: not expanded(a, "veg"))
    find = a.find_element(By.ID, "find")
    find.send_keys("lee")
    wait(a, lambda a: "Leek" in a.find_element(By.ID, "results").text)
    find.send_keys(Keys.ENTER)
    # Revealed for everyone, and this page scrolls to the row and puts the caret in it.
    wait(b, lambda b: expanded(b, "veg"))
    wait(a, lambda a: a.execute_script("return document.activeElement.closest('li')?.dataset.row") == "leek")


def test_find_reveals_a_row_of_a_section_that_was_collapsed_when_the_page_loaded(server, browsers, session_name):
    # Nuts is collapsed before the page opens: the page has its row count, never its rows, so
    # only the server's find can name Pecan.
    seed(server, session_name, [FRUIT, NUTS])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    assert not expanded(a, "nuts")
    assert a.execute_script("return document.querySelectorAll('li[data-row=\"pecan\"]').length") == 0
    find = a.find_element(By.ID, "find")
    find.send_keys("peca")
    wait(a, lambda a: "Pecan" in a.find_element(By.ID, "results").text)
    find.send_keys(Keys.ENTER)
    wait(b, lambda b: expanded(b, "nuts"))
    wait(a, lambda a: a.execute_script("return document.activeElement.closest('li')?.dataset.row") == "pecan")


WATCH_BUSY = """
    // Watch aria-busy from inside the page: the busy phase may be short. Also note long tasks.
    const sec = document.querySelector('section[data-sec="big"]');
    window.sawBusy = false;
    window.longest = 0;
    new MutationObserver(() => {
      if (sec.getAttribute('aria-busy') === 'true' &&
          getComputedStyle(sec.querySelector('.spin')).display !== 'none') window.sawBusy = true;
    }).observe(sec, {attributes: true, attributeFilter: ['aria-busy']});
    new PerformanceObserver((l) => {
      for (const e of l.getEntries()) window.longest = Math.max(window.longest, e.duration);
    }).observe({type: 'longtask'});
"""


def test_busy_spinner_shows_on_a_large_section_and_the_page_stays_responsive(browsers):
    busy = Server(busy_threshold_ms=0).start()
    try:
        b = browsers()
        open_as(b, busy, "ana", "/s/demo")
        b.execute_script(WATCH_BUSY)
        press(b, "big")
        wait(b, lambda b: b.execute_script("return window.sawBusy"), timeout=10)
        big = snapshot(busy, "demo")
        total = next(s["rowCount"] for s in big["sections"] if s["key"] == "big")
        assert total >= 50000
        # All rows arrive; the spinner goes; only a window of them is in the DOM.
        wait(b, lambda b: head(b, "big").find_element(By.CSS_SELECTOR, ".spin").is_displayed() is False
             and b.find_element(By.CSS_SELECTOR, 'section[data-sec="big"]').get_attribute("aria-busy") == "false",
             timeout=30)
        drawn = len(b.find_elements(By.CSS_SELECTOR, 'section[data-sec="big"] li.row'))
        assert 0 < drawn < 200
        # Scroll to the end of the big list: the last row is drawn.
        t0 = time.monotonic()
        b.execute_script("const r = document.querySelector('section[data-sec=\"big\"] .rows'); r.scrollTop = r.scrollHeight;")
        wait(b, lambda b: b.execute_script(
            "const l = [...document.querySelectorAll('section[data-sec=\"big\"] li.row')];"
            "return l.some(li => li.dataset.row && +li.getAttribute('aria-posinset') === arguments[0])", total), timeout=5)
        assert time.monotonic() - t0 < 3
    finally:
        busy.stop()


def test_with_permessage_deflate_on_a_browser_gets_a_large_section_compressed_and_whole(browsers):
    zipped = Server(extra=["--permessage-deflate"]).start()
    try:
        def metric(name):
            with urllib.request.urlopen(zipped.url + "/metrics", timeout=5) as r:
                return float(re.search(rf"^{name} (\S+)$", r.read().decode(), re.M).group(1))

        b = browsers()
        open_as(b, zipped, "ana", "/s/demo")
        wire, payload = metric("foldtable_written_bytes_total"), metric("foldtable_written_payload_bytes_total")
        press(b, "big")
        total = next(s["rowCount"] for s in snapshot(zipped, "demo")["sections"] if s["key"] == "big")
        # Scrolled to the end until the last row is drawn: every row arrived.
        wait(b, lambda b: b.execute_script(
            "const r = document.querySelector('section[data-sec=\"big\"] .rows');"
            "if (r) r.scrollTop = r.scrollHeight;"
            "const l = [...document.querySelectorAll('section[data-sec=\"big\"] li.row')];"
            "return l.some(li => li.dataset.row && +li.getAttribute('aria-posinset') === arguments[0])", total), timeout=30)
        # Chromium offers the extension by itself; the rows crossed the wire compressed (the
        # snapshot peer above offers it too, and got only a welcome).
        wire, payload = metric("foldtable_written_bytes_total") - wire, metric("foldtable_written_payload_bytes_total") - payload
        assert payload > 1_000_000 and wire < payload / 3
    finally:
        zipped.stop()


def test_local_spinner_shows_while_a_large_expansion_streams_in_even_if_the_server_reports_no_busy(browsers):
    # The server would report busy only after a minute, so any spinner is the page's own.
    slow = Server(busy_threshold_ms=60000, extra=["--demo-large-rows", "200000"]).start()
    try:
        b = browsers()
        open_as(b, slow, "ana", "/s/demo")
        b.execute_script(WATCH_BUSY)
        # Freeze the server so the rows cannot arrive within 0.5 s however fast this machine is.
        os.kill(slow.proc.pid, signal.SIGSTOP)
        try:
            press(b, "big")
            wait(b, lambda b: b.execute_script("return window.sawBusy"), timeout=10)
        finally:
            os.kill(slow.proc.pid, signal.SIGCONT)
        wait(b, lambda b: "200,000 rows" in head(b, "big").find_element(By.CSS_SELECTOR, ".count").get_attribute("textContent") and
             b.find_element(By.CSS_SELECTOR, 'section[data-sec="big"]').get_attribute("aria-busy") == "false",
             timeout=60)
        # Rows went into a windowed list without freezing the page for long.
        assert len(b.find_elements(By.CSS_SELECTOR, 'section[data-sec="big"] li.row')) < 200
        assert b.execute_script("return window.longest") < 1000
    finally:
        slow.stop()


def test_page_reconnects_and_catches_up_after_the_server_restarts(browsers):
    port = free_port()  # the page must find the new server where the old one was
    s = Server(port=port).start()
    try:
        b = browsers()
        open_as(b, s, "ana", "/s/demo")
        s.stop()
        wait(b, lambda b: b.find_element(By.ID, "banner").is_displayed() and
             "Connection lost" in b.find_element(By.ID, "banner").text)
        # An edit made while offline is queued...
        b.find_element(By.ID, "edit").click()
        b.find_element(By.ID, "new-section-title").send_keys("Made offline", Keys.ENTER)
        wait(b, lambda b: "1 change will be sent" in b.find_element(By.ID, "banner").text)
        s = Server(port=port).start()
        # ...and sent once after the reconnect.
        wait(b, lambda b: not b.find_element(By.ID, "banner").is_displayed(), timeout=20)
        wait(b, lambda b: section_titles(b).count("Made offline") == 1)
        # Changes made by others after the restart arrive too.
        seed(s, "demo", [{"key": "after", "title": "After restart"}])
        wait(b, lambda b: "After restart" in section_titles(b))
        titles = [x["title"] for x in snapshot(s, "demo")["sections"]]
        assert titles.count("Made offline") == 1
        assert section_titles(b) == titles
    finally:
        s.stop()


def test_page_resumes_after_a_network_drop_and_sends_what_was_queued(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    network = lambda offline: b.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": offline, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    b.execute_cdp_cmd("Network.enable", {})
    network(True)
    wait(b, lambda b: b.find_element(By.ID, "banner").is_displayed())
    # Others carry on meanwhile.
    peer = Peer(server, session_name, name="bo")
    try:
        peer.send({"type": "updateRow", "row": "apple", "set": {"value": "granny smith"}})
        peer.send({"type": "set", "section": "veg", "collapsed": True})
    finally:
        peer.close()
    # This page edits offline; the edit waits in the outbox.
    edit_value(b, "pear", "williams", Keys.TAB)
    wait(b, lambda b: "1 change will be sent" in b.find_element(By.ID, "banner").text)
    network(False)
    wait(b, lambda b: not b.find_element(By.ID, "banner").is_displayed(), timeout=15)
    # Resumed (not reloaded): the missed events were replayed.
    wait(b, lambda b: "Caught up on 2 changes" in b.find_element(By.ID, "live").get_attribute("textContent"))
    wait(b, lambda b: value_text(b, "apple") == "granny smith" and not expanded(b, "veg"))
    assert value_text(b, "pear") == "williams"
    rows = {r["key"]: r["value"] for s in snapshot(server, session_name)["sections"] for r in s.get("rows", [])}
    assert rows["pear"] == "williams"


def test_a_new_display_name_is_remembered_and_shown_to_others(server, browsers, session_name):
    seed(server, session_name, [FRUIT])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    wait(b, lambda b: "ana" in b.find_element(By.ID, "people").text)
    a.find_element(By.ID, "name").send_keys(Keys.CONTROL, "a")
    a.find_element(By.ID, "name").send_keys("ana maria", Keys.ENTER)
    wait(b, lambda b: "ana maria" in b.find_element(By.ID, "people").text
         and "2 here" in b.find_element(By.ID, "people").text)
    # A rename, not a leave and a join: the others are told so.
    wait(b, lambda b: "ana is now ana maria" in b.find_element(By.ID, "live").get_attribute("textContent"))
    assert "left" not in b.find_element(By.ID, "live").get_attribute("textContent")
    assert a.execute_script("return localStorage.getItem('foldtable.name')") == "ana maria"
    press(a, "fruit")
    wait(b, lambda b: "ana maria" in b.find_element(By.CSS_SELECTOR, 'section[data-sec="fruit"] .badges').text)


def test_layout_fits_320px_respects_reduced_motion_and_breaks_no_csp_rule(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    b = browsers(width=320, height=700)
    b.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-reduced-motion", "value": "reduce"}]})
    open_as(b, server, "a-rather-long-display-name", f"/s/{session_name}")
    body = 'section[data-sec="fruit"] .body'
    assert b.execute_script(f"return getComputedStyle(document.querySelector('{body}')).transitionDuration") == "0s"
    press(b, "fruit")
    wait(b, lambda b: not expanded(b, "fruit") and not value_of(b, "apple").is_displayed())
    width = b.execute_script("return document.documentElement.clientWidth")
    assert width <= 340
    assert b.execute_script("return document.documentElement.scrollWidth") <= width
    b.find_element(By.ID, "edit").click()
    assert b.execute_script("return document.documentElement.scrollWidth") <= width
    problems = [l["message"] for l in b.get_log("browser")
                if l["level"] == "SEVERE" or "Content Security Policy" in l["message"]]
    assert problems == []


def test_rows_imported_over_the_api_replace_a_shown_section_and_wait_in_a_collapsed_one(server, browsers, session_name):
    import urllib.request
    seed(server, session_name, [FRUIT, NUTS])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    labels = lambda key: [e.text for e in b.find_elements(By.CSS_SELECTOR, f'section[data-sec="{key}"] li.row .label')]

    def post(section, body, query=""):
        request = urllib.request.Request(
            f"{server.url}/api/v1/sessions/{session_name}/sections/{section}/rows{query}", data=body.encode(),
            headers={"Content-Type": "text/csv"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    wait(b, lambda b: labels("fruit") == ["Apple", "Pear", "Plum"])
    post("fruit", "label,value\nQuince,yellow\nFig,purple\n")
    wait(b, lambda b: labels("fruit") == ["Quince", "Fig"])
    # Nuts is collapsed and the page never had its rows: appended ones come with the expansion.
    post("Nuts", "label\nWalnut\n", "?by=title&mode=append")
    press(b, "nuts")
    wait(b, lambda b: labels("nuts") == ["Pecan", "Walnut"])


def test_a_link_to_a_missing_session_says_so_and_makes_nothing_while_the_lobby_form_creates_it(browsers, session_name):
    server = Server().start()
    try:
        b = browsers()
        open_as(b, server, "ana", "/")
        b.get(f"{server.url}/s/{session_name}")
        wait(b, lambda b: "No session has this name" in b.find_element(By.ID, "banner").text, timeout=10)
        b.get(server.url + "/")
        # The lobby lists what exists (demo, once the list came): the link made nothing.
        wait(b, lambda b: any("demo" in li.text for li in b.find_elements(By.CSS_SELECTOR, "#sessions li")))
        assert not any(session_name in li.text for li in b.find_elements(By.CSS_SELECTOR, "#sessions li"))
        b.find_element(By.ID, "session-name").send_keys(session_name, Keys.ENTER)
        wait(b, lambda b: "here:" in b.find_element(By.ID, "people").text, timeout=10)
        # The address shared from here opens the session, and never asks to create it.
        assert b.current_url.endswith(f"/s/{session_name}"), b.current_url
    finally:
        server.stop()


def test_a_burst_of_others_changes_is_announced_once_counting_the_rest_in_good_english(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    live = lambda b: b.find_element(By.ID, "live").get_attribute("textContent")
    peer = Peer(server, session_name, name="bo")
    try:
        wait(b, lambda b: "bo joined" in live(b))
        time.sleep(1)  # that announcement is out: the next burst is announced on its own
        # Two changes within the announcement's 0.7 s window: the last, and one more change.
        peer.send({"type": "set", "section": "fruit", "collapsed": True})
        peer.send({"type": "set", "section": "veg", "collapsed": True})
        wait(b, lambda b: "bo collapsed Vegetables (and 1 more change)" == live(b))
        time.sleep(1)
        # Three: two more changes.
        peer.send({"type": "set", "section": "fruit", "collapsed": False})
        peer.send({"type": "set", "section": "veg", "collapsed": False})
        peer.send({"type": "set", "section": "fruit", "collapsed": True})
        wait(b, lambda b: "bo collapsed Fruit (and 2 more changes)" == live(b))
    finally:
        peer.close()
