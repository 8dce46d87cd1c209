"""Table options in the web client: the options panel, title lines, the busy indicator switch, the
turning indicator, and scrolling a newly expanded last section's rows into view."""
import os
import signal
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import Peer, Server, seed, snapshot
from test_web import FRUIT, NUTS, VEG, WATCH_BUSY, expanded, head, open_as, press, wait


def set_options(server, session, **options):
    p = Peer(server, session)
    try:
        p.send({"type": "setOptions", "options": options})
    finally:
        p.close()


def indicator(b, key):
    return head(b, key).find_element(By.CSS_SELECTOR, ".ind").get_attribute("textContent")


def retype(field, text):
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.BACKSPACE, text, Keys.TAB)


def test_the_options_panel_sets_every_option_and_each_change_reaches_the_other_window(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG, NUTS])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    # Open mode (no tokens, no roles): the panel comes with edit mode.
    assert not a.find_element(By.ID, "options").is_displayed()
    a.find_element(By.ID, "edit").click()
    wait(a, lambda a: a.find_element(By.ID, "options").is_displayed())
    assert not b.find_element(By.ID, "options").is_displayed()
    field = lambda b, id: b.find_element(By.ID, id)
    assert field(a, "opt-collapsed").get_attribute("value") == "+"
    assert field(a, "opt-busy").is_selected() and not field(a, "opt-accordion").is_selected()

    retype(field(a, "opt-collapsed"), "▸")
    wait(b, lambda b: indicator(b, "nuts") == "▸")
    retype(field(a, "opt-expanded"), "▾")
    wait(b, lambda b: indicator(b, "fruit") == "▾" and indicator(b, "nuts") == "▸")
    retype(field(a, "opt-lines"), "1")
    wait(b, lambda b: "clamp" in b.find_element(By.ID, "table").get_attribute("class"))
    # Told in words too (the polite live region).
    wait(b, lambda b: "ana limited titles to 1 line" in b.find_element(By.ID, "live").get_attribute("textContent"))
    retype(field(a, "opt-threshold"), "1200")
    field(a, "opt-busy").click()
    field(a, "opt-initially").click()
    field(a, "opt-accordion").click()
    wait(b, lambda b: b.find_element(By.ID, "accordion").is_selected())
    wait(a, lambda a: snapshot(server, session_name)["options"] == {
        "sectionsInitiallyCollapsed": True, "collapsedIndicator": "▸", "expandedIndicator": "▾", "accordion": True,
        "busyThresholdMs": 1200, "showBusyIndicator": False, "titleLines": 1})
    # Accordion collapsed all but the first expanded section, for everyone.
    wait(b, lambda b: expanded(b, "fruit") and not expanded(b, "veg"))
    # The other window's panel shows what was set.
    b.find_element(By.ID, "edit").click()
    wait(b, lambda b: field(b, "opt-collapsed").get_attribute("value") == "▸"
         and field(b, "opt-expanded").get_attribute("value") == "▾"
         and field(b, "opt-lines").get_attribute("value") == "1"
         and field(b, "opt-threshold").get_attribute("value") == "1200"
         and not field(b, "opt-busy").is_selected()
         and field(b, "opt-initially").is_selected() and field(b, "opt-accordion").is_selected())
    # A new section now starts collapsed.
    b.find_element(By.ID, "new-section-title").send_keys("Herbs", Keys.ENTER)
    wait(a, lambda a: any(s.get_attribute("aria-expanded") == "false"
                          for s in a.find_elements(By.XPATH, '//button[contains(@class,"toggle")][.//span[text()="Herbs"]]')))
    # What the server would refuse is not sent: an indicator over 16 bytes (six characters of three
    # bytes each; the field takes up to 16 characters), a title line count over 10.
    retype(field(b, "opt-collapsed"), "▸" * 6)
    wait(b, lambda b: "1 to 16 bytes" in b.find_element(By.ID, "note").text)
    assert field(b, "opt-collapsed").get_attribute("value") == "▸"
    retype(field(b, "opt-lines"), "11")
    wait(b, lambda b: "from 0 to 10" in b.find_element(By.ID, "note").text)
    assert field(b, "opt-lines").get_attribute("value") == "1"
    assert snapshot(server, session_name)["options"]["titleLines"] == 1
    # Turning it back on: the busy indicator is shown again.
    field(b, "opt-busy").click()
    wait(a, lambda a: field(a, "opt-busy").is_selected())


def test_title_lines_clamp_long_titles_and_keep_the_whole_title_for_screen_readers_and_on_hover(server, browsers, session_name):
    long_title = "A very long section title that wraps over several lines " * 4 + "THE END"
    seed(server, session_name, [{"key": "long", "title": long_title, "rows": [("r1", "Row", "")]},
                                {"key": "two", "title": "Province\nSichuan"}])
    b = browsers(width=500, height=800)
    open_as(b, server, "ana", f"/s/{session_name}")
    title = lambda key: b.find_element(By.CSS_SELECTOR, f'section[data-sec="{key}"] .title')
    metrics = lambda key: b.execute_script(
        "const e = arguments[0]; return [e.clientHeight, e.scrollHeight, parseFloat(getComputedStyle(e).lineHeight)]",
        title(key))
    height, full, line = metrics("long")
    assert height > 2.5 * line and full <= height + 1  # whole, on several lines
    assert title("long").get_attribute("title") in (None, "")

    set_options(server, session_name, titleLines=1)
    wait(b, lambda b: metrics("long")[0] < 1.5 * metrics("long")[2])
    height, full, line = metrics("long")
    assert full > height + line  # the rest is cut off (with an ellipsis), not gone
    assert metrics("two")[0] < 1.5 * line  # "Province", not "Sichuan"
    assert title("long").get_attribute("textContent") == long_title
    assert title("long").get_attribute("title") == long_title  # on hover
    assert "THE END" in head(b, "long").accessible_name  # screen readers get all of it

    set_options(server, session_name, titleLines=2)
    wait(b, lambda b: 1.5 * line < metrics("long")[0] < 2.5 * line)
    assert metrics("two")[1] <= metrics("two")[0] + 1  # two lines fit two lines: nothing cut

    set_options(server, session_name, titleLines=0)
    wait(b, lambda b: metrics("long")[0] > 2.5 * line)
    assert title("long").get_attribute("title") in (None, "")


SCROLL_SPY = """
    // Record how the page scrolls itself: every scrollBy with its behaviour.
    window.scrolls = [];
    const scrollBy = window.scrollBy.bind(window);
    window.scrollBy = (o) => { window.scrolls.push(o && o.behavior); return scrollBy(o); };
"""

LAST_ROWS_IN_VIEW = """
    const sec = document.querySelector('section[data-sec="last"]');
    const rows = [...sec.querySelectorAll('li.row')].slice(0, arguments[0]);
    const h = document.documentElement.clientHeight;
    const head = sec.querySelector('.toggle').getBoundingClientRect();
    return rows.length === arguments[0] && head.top >= 0 &&
      rows.every((r) => r.getBoundingClientRect().bottom <= h + 1);
"""


def scroll_session(server, session_name, last_rows):
    filler = {"key": "filler", "title": "Filler", "rows": [(f"f{i}", f"Filler {i}", "") for i in range(20)]}
    last = {"key": "last", "title": "Last", "collapsed": True,
            "rows": [(f"l{i}", f"Last {i}", str(i)) for i in range(last_rows)]}
    seed(server, session_name, [FRUIT, filler, last])


def test_expanding_the_last_section_scrolls_up_to_five_of_its_rows_into_view(server, browsers, session_name):
    scroll_session(server, session_name, last_rows=8)
    b = browsers(width=900, height=600)
    open_as(b, server, "ana", f"/s/{session_name}")
    b.execute_script(SCROLL_SPY)
    # Expanding a section that is not the last scrolls nothing.
    press(b, "fruit")
    wait(b, lambda b: not expanded(b, "fruit"))
    press(b, "fruit")
    wait(b, lambda b: expanded(b, "fruit"))
    time.sleep(0.5)
    assert b.execute_script("return window.scrolls") == []
    # The last section's header at the bottom of the window: its rows open below the fold.
    b.execute_script("window.scrollTo(0, document.documentElement.scrollHeight)")
    wait(b, lambda b: b.execute_script(
        "const r = document.querySelector('section[data-sec=\"last\"] .toggle').getBoundingClientRect();"
        "return r.bottom <= innerHeight && r.bottom > innerHeight - 120"))
    assert not b.execute_script(LAST_ROWS_IN_VIEW, 5)
    press(b, "last")
    wait(b, lambda b: b.execute_script(LAST_ROWS_IN_VIEW, 5), timeout=5)
    assert b.execute_script("return window.scrolls") == ["smooth"]
    # Up to five: the page does not scroll on to the section's end.
    assert not b.execute_script(LAST_ROWS_IN_VIEW, 8)


def test_with_reduced_motion_the_last_sections_rows_come_into_view_without_smooth_scrolling(server, browsers, session_name):
    scroll_session(server, session_name, last_rows=3)
    b = browsers(width=900, height=600)
    b.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-reduced-motion", "value": "reduce"}]})
    open_as(b, server, "ana", f"/s/{session_name}")
    b.execute_script(SCROLL_SPY)
    b.execute_script("window.scrollTo(0, document.documentElement.scrollHeight)")
    press(b, "last")
    wait(b, lambda b: b.execute_script(LAST_ROWS_IN_VIEW, 3), timeout=5)  # all three: fewer than five
    assert b.execute_script("return window.scrolls") == ["auto"]


TURNS = """
    // Every class the indicator of a section takes on, in order.
    const ind = document.querySelector(`section[data-sec="${arguments[0]}"] .ind`);
    window.turns = [];
    new MutationObserver((records) => {
      for (const r of records) if (r.oldValue && r.oldValue !== 'ind') window.turns.push(r.oldValue);
    }).observe(ind, {attributes: true, attributeFilter: ['class'], attributeOldValue: true});
"""


def test_the_indicator_turns_into_its_new_state_unless_motion_is_reduced(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    ind = lambda b: head(b, "fruit").find_element(By.CSS_SELECTOR, ".ind")
    assert ind(b).value_of_css_property("transition-property") == "transform"
    assert ind(b).value_of_css_property("transition-duration") != "0s"
    b.execute_script(TURNS, "fruit")
    press(b, "fruit")
    wait(b, lambda b: not expanded(b, "fruit"))
    press(b, "fruit")
    wait(b, lambda b: expanded(b, "fruit"))
    # Collapsing turns "+" in from the right, expanding turns "−" in from the left; at rest upright.
    wait(b, lambda b: b.execute_script("return window.turns") == ["ind turn-from-right", "ind turn-from-left"])
    wait(b, lambda b: b.execute_script("return getComputedStyle(arguments[0]).transform", ind(b)) in ("none", "matrix(1, 0, 0, 1, 0, 0)"))
    assert ind(b).get_attribute("textContent") == "−"

    calm = browsers()
    calm.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-reduced-motion", "value": "reduce"}]})
    open_as(calm, server, "bo", f"/s/{session_name}")
    assert ind(calm).value_of_css_property("transition-duration") == "0s"
    calm.execute_script(TURNS, "veg")
    press(calm, "veg")
    wait(calm, lambda c: not expanded(c, "veg"))
    assert calm.execute_script("return window.turns") == []
    assert head(calm, "veg").find_element(By.CSS_SELECTOR, ".ind").get_attribute("textContent") == "+"


def test_with_the_busy_indicator_off_no_spinner_shows_and_the_server_sends_no_busy(browsers):
    # Busy at once, were it on; the frozen server below would also make the page's own spinner show.
    s = Server(busy_threshold_ms=0).start()
    watcher = None
    try:
        set_options(s, "demo", showBusyIndicator=False)
        watcher = Peer(s, "demo", name="watcher")
        b = browsers()
        open_as(b, s, "ana", "/s/demo")
        b.execute_script(WATCH_BUSY)
        os.kill(s.proc.pid, signal.SIGSTOP)
        try:
            press(b, "big")
            time.sleep(1.2)  # well past the page's own threshold (500 ms)
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
        wait(b, lambda b: b.execute_script(
            "return document.querySelectorAll('section[data-sec=\"big\"] li.row').length") > 0, timeout=30)
        assert b.execute_script("return window.sawBusy") is False
        assert b.find_element(By.CSS_SELECTOR, 'section[data-sec="big"]').get_attribute("aria-busy") == "false"
        seen = []
        try:
            watcher.wait(lambda m: seen.append(m["type"]) or m["type"] == "busy", timeout=3)
        except TimeoutError:
            pass
        assert "busy" not in seen and "rows" in seen
    finally:
        if watcher:
            watcher.close()
        s.stop()


def hs256(claims, secret):
    """A token as `foldtabled token` signs it (HS256 JWT), made here from the standard library."""
    import base64
    import hashlib
    import hmac
    import json
    part = lambda data: base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    signing_input = (part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "."
                     + part(json.dumps(claims).encode()))
    return signing_input + "." + part(hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest())


def test_with_tokens_only_an_owner_gets_the_options_panel(browsers, session_name, tmp_path):
    secret = os.urandom(32).hex()
    (tmp_path / "secret").write_text(secret)
    s = Server(extra=["--token-secret-file", str(tmp_path / "secret")]).start()
    try:
        def page(role, name, new=False):
            claims = {"sub": name, "name": name, "sessions": [session_name], "role": role, "exp": int(time.time()) + 600}
            b = browsers()
            # `?new` (what the lobby's form adds) makes the session: only an owner's page may.
            b.get(f"{s.url}/s/{session_name}?{'new&' if new else ''}token={hs256(claims, secret)}")
            wait(b, lambda b: "here:" in b.find_element(By.ID, "people").text, timeout=10)
            return b
        owner = page("owner", "olga", new=True)
        editor = page("editor", "ed")
        # The owner has the panel without edit mode; the editor has it in neither (the server
        # would refuse its setOptions), and its accordion switch is off limits too.
        wait(owner, lambda o: o.find_element(By.ID, "options").is_displayed())
        assert owner.find_element(By.ID, "accordion").is_enabled()
        assert not editor.find_element(By.ID, "options").is_displayed()
        editor.find_element(By.ID, "edit").click()
        wait(editor, lambda e: e.find_element(By.ID, "add-section").is_displayed())
        assert not editor.find_element(By.ID, "options").is_displayed()
        assert not editor.find_element(By.ID, "accordion").is_enabled()
        # What the owner sets reaches the editor.
        owner.find_element(By.ID, "opt-accordion").click()
        wait(editor, lambda e: e.find_element(By.ID, "accordion").is_selected())
    finally:
        s.stop()
