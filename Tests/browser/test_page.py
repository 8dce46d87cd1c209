"""The page reads like a table: values as text, edits in place and in labelled fields, moving with
the keyboard and by dragging, what viewers see, find's answers, and the bugs fixed on the way
(the lobby's refused list, the options panel at phone width)."""
import os
import time

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import Server, seed, snapshot, welcome
from test_table_options import hs256
from test_web import FRUIT, NUTS, VEG, edit_mode, expanded, head, open_as, section_titles, value_of, wait


def rows_of(table, key):
    return [r["key"] for s in table["sections"] if s["key"] == key for r in s.get("rows", [])]


def seq_of(server, session):
    """The session's last seq, as a fresh member's welcome says."""
    return welcome(server, session)["seq"]


def test_outside_edit_mode_the_rows_have_no_text_inputs_and_enter_edits_a_value_in_place(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    fields = lambda b: b.find_elements(By.CSS_SELECTOR, "#table input, #table textarea, #table select")
    assert fields(b) == []
    assert value_of(b, "apple").text == "red"
    # The keyboard: focus the value, Enter opens a field in place with the value in it.
    b.execute_script("arguments[0].focus()", value_of(b, "apple"))
    ActionChains(b).send_keys(Keys.ENTER).perform()
    field = wait(b, lambda b: b.find_element(By.CSS_SELECTOR, 'li[data-row="apple"] .in-value'))
    assert b.switch_to.active_element == field and field.get_attribute("value") == "red"
    assert field.get_attribute("aria-label") == "Apple"
    ActionChains(b).send_keys(Keys.BACKSPACE * 3, "crimson", Keys.ENTER).perform()
    # Saved, and text again, with the focus back on it.
    wait(b, lambda b: fields(b) == [] and value_of(b, "apple").text == "crimson")
    assert b.switch_to.active_element == value_of(b, "apple")
    wait(b, lambda b: any(r["value"] == "crimson" for s in snapshot(server, session_name)["sections"]
                          for r in s.get("rows", []) if r["key"] == "apple"))
    # Escape puts back the value from before, for everyone.
    value_of(b, "pear").click()
    wait(b, lambda b: fields(b))
    ActionChains(b).send_keys(Keys.END, "ish").perform()  # opened with the value selected
    wait(b, lambda b: any(r["value"] == "greenish" for s in snapshot(server, session_name)["sections"]
                          for r in s.get("rows", []) if r["key"] == "pear"))
    ActionChains(b).send_keys(Keys.ESCAPE).perform()
    wait(b, lambda b: fields(b) == [] and value_of(b, "pear").text == "green")
    wait(b, lambda b: any(r["value"] == "green" for s in snapshot(server, session_name)["sections"]
                          for r in s.get("rows", []) if r["key"] == "pear"))


def test_edit_mode_has_labelled_fields_and_a_two_line_title_keeps_its_line_break(server, browsers, session_name):
    seed(server, session_name, [{"key": "sichuan", "title": "Province\nSichuan", "rows": [("cd", "Chengdu", "")]}, VEG])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    edit_mode(b)
    sec = lambda key: b.find_element(By.CSS_SELECTOR, f'section[data-sec="{key}"]')
    names = [e.text for e in sec("sichuan").find_elements(By.CSS_SELECTOR, ".tools .fld-name")]
    assert names == ["Title", "Detail", "Footer"]
    title = sec("sichuan").find_element(By.CSS_SELECTOR, ".tools textarea.in-title")
    assert title.get_attribute("value") == "Province\nSichuan"
    assert title.get_attribute("aria-label").startswith("Title")
    # Editing the second line keeps the first: Enter saves.
    title.click()
    title.send_keys(Keys.CONTROL, Keys.END)
    title.send_keys(" West", Keys.ENTER)
    wait(b, lambda b: [s["title"] for s in snapshot(server, session_name)["sections"]][0] == "Province\nSichuan West")
    # Shift+Enter starts a second line in a one-line title.
    veg = sec("veg").find_element(By.CSS_SELECTOR, ".in-title")
    veg.send_keys(Keys.CONTROL, "a")
    veg.send_keys(Keys.BACKSPACE, "Greens")
    veg.send_keys(Keys.SHIFT, Keys.ENTER)
    veg.send_keys("and roots", Keys.ENTER)
    wait(b, lambda b: [s["title"] for s in snapshot(server, session_name)["sections"]][1] == "Greens\nand roots")


def test_sections_and_rows_move_with_alt_arrows_and_a_row_moves_on_into_the_next_section(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    keys = ActionChains(a)
    a.execute_script("arguments[0].focus()", head(a, "fruit"))
    keys.key_down(Keys.ALT).send_keys(Keys.ARROW_DOWN).key_up(Keys.ALT).perform()
    wait(b, lambda b: section_titles(b) == ["Vegetables", "Fruit"])
    assert a.switch_to.active_element == head(a, "fruit")  # the focus moved with it
    wait(a, lambda a: section_titles(a) == ["Vegetables", "Fruit"])
    # A row: down, down and up within its section, then up twice: past the first row into the
    # section before. Keys pressed faster than the server answers each go on from where the press
    # before put the row (the page plans with its own moves still in flight), so no waits between
    # them: planned from what the page showed, down-down-up would have ended in Vegetables.
    a.execute_script("arguments[0].focus()", value_of(a, "apple"))
    before = seq_of(server, session_name)
    ActionChains(a).key_down(Keys.ALT).send_keys(Keys.ARROW_DOWN, Keys.ARROW_DOWN, Keys.ARROW_UP).key_up(Keys.ALT).perform()
    wait(a, lambda a: seq_of(server, session_name) >= before + 3)
    assert seq_of(server, session_name) == before + 3
    assert rows_of(snapshot(server, session_name), "fruit") == ["pear", "apple", "plum"]
    ActionChains(a).key_down(Keys.ALT).send_keys(Keys.ARROW_UP, Keys.ARROW_UP).key_up(Keys.ALT).perform()
    wait(a, lambda a: seq_of(server, session_name) >= before + 5)
    assert rows_of(snapshot(server, session_name), "veg") == ["kale", "leek", "apple"]
    assert rows_of(snapshot(server, session_name), "fruit") == ["pear", "plum"]
    wait(b, lambda b: b.find_elements(By.CSS_SELECTOR, 'section[data-sec="veg"] li[data-row="apple"]'))
    wait(a, lambda a: a.execute_script("return document.activeElement.closest('li')?.dataset.row") == "apple")
    # Arrows without Alt still walk the headers and move nothing.
    a.execute_script("arguments[0].focus()", head(a, "veg"))
    ActionChains(a).send_keys(Keys.ARROW_DOWN).perform()
    assert a.switch_to.active_element == head(a, "fruit")
    assert [s["key"] for s in snapshot(server, session_name)["sections"]] == ["veg", "fruit"]


def test_sections_and_rows_can_be_dragged_by_their_grips_also_into_another_section(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG, NUTS])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    assert b.find_elements(By.CSS_SELECTOR, ".grip") == []  # only in edit mode
    b.find_element(By.ID, "edit").click()
    grip = lambda css: wait(b, lambda b: b.find_element(By.CSS_SELECTOR, f"{css} .grip"))
    # Fruit dropped on the top of the Nuts header: between Vegetables and Nuts.
    target = head(b, "nuts")
    ActionChains(b).click_and_hold(grip('section[data-sec="fruit"] .head')).move_to_element(target) \
        .move_by_offset(0, 2).move_to_element_with_offset(target, 0, -target.size["height"] // 2 + 2).release().perform()
    wait(b, lambda b: [s["key"] for s in snapshot(server, session_name)["sections"]] == ["veg", "fruit", "nuts"])
    # A row dragged onto a row of another section lands before it.
    leek = b.find_element(By.CSS_SELECTOR, 'li[data-row="leek"]')
    ActionChains(b).click_and_hold(grip('li[data-row="plum"]')).move_to_element(leek) \
        .move_to_element_with_offset(leek, 0, -leek.size["height"] // 2 + 3).release().perform()
    wait(b, lambda b: rows_of(snapshot(server, session_name), "veg") == ["kale", "plum", "leek"])
    # Dropped on the header of a collapsed section: appended to it.
    ActionChains(b).click_and_hold(grip('li[data-row="apple"]')).move_to_element(head(b, "nuts")) \
        .move_by_offset(0, 1).release().perform()
    # (A collapsed section's rows are not in a snapshot: its count and the other section's rows say it.)
    wait(b, lambda b: rows_of(snapshot(server, session_name), "fruit") == ["pear"])
    assert [s["rowCount"] for s in snapshot(server, session_name)["sections"] if s["key"] == "nuts"] == [2]
    assert not expanded(b, "nuts")
    head(b, "nuts").click()
    wait(b, lambda b: [e.get_attribute("value") for e in
                       b.find_elements(By.CSS_SELECTOR, 'section[data-sec="nuts"] li.row .in-label')] == ["Pecan", "Apple"])


def test_a_viewers_page_has_no_edit_controls(browsers, session_name, tmp_path):
    secret = os.urandom(32).hex()
    (tmp_path / "secret").write_text(secret)
    s = Server(extra=["--token-secret-file", str(tmp_path / "secret")]).start()
    try:
        def page(role, name, new=False):
            claims = {"sub": name, "name": name, "sessions": [session_name], "role": role, "exp": int(time.time()) + 600}
            b = browsers()
            b.get(f"{s.url}/s/{session_name}?{'new&' if new else ''}token={hs256(claims, secret)}")
            wait(b, lambda b: "here:" in b.find_element(By.ID, "people").text, timeout=10)
            return b
        owner = page("owner", "olga", new=True)
        owner.find_element(By.ID, "edit").click()
        owner.find_element(By.ID, "new-section-title").send_keys("Fruit", Keys.ENTER)
        wait(owner, lambda o: o.find_elements(By.CSS_SELECTOR, ".sec [data-act=addrow]"))
        owner.find_element(By.CSS_SELECTOR, ".sec [data-act=addrow]").click()
        wait(owner, lambda o: o.find_elements(By.CSS_SELECTOR, "li.row"))
        viewer = page("viewer", "vic")
        wait(viewer, lambda v: v.find_elements(By.CSS_SELECTOR, "li.row"))
        shown = lambda css: [e for e in viewer.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()]
        # Nothing that changes the table: no edit switch, no accordion, no expand/collapse all,
        # no add form, no options, and values are plain text.
        for css in ("#edit", "#accordion", "#expand-all", "#collapse-all", "#add-section", "#options",
                    "#table input", "#table textarea", "#table button:not(.toggle)", ".grip"):
            assert shown(css) == [], css
        assert viewer.find_element(By.CSS_SELECTOR, "li.row .value").tag_name == "span"
        # The owner's page has them.
        assert owner.find_element(By.ID, "edit").is_displayed()
        assert owner.find_element(By.CSS_SELECTOR, "li.row button.value").is_displayed()
        # A viewer folds only its own view: in the shared one the page says how, sending nothing.
        key = viewer.find_element(By.CSS_SELECTOR, ".sec").get_attribute("data-sec")
        viewer.find_element(By.CSS_SELECTOR, ".sec .toggle").click()
        wait(viewer, lambda v: "My view" in v.find_element(By.ID, "note").text)
        assert viewer.find_element(By.CSS_SELECTOR, ".sec .toggle").get_attribute("aria-expanded") == "true"
        viewer.find_element(By.ID, "my-view").click()
        wait(viewer, lambda v: v.find_element(By.ID, "collapse-all").is_displayed())
        viewer.find_element(By.CSS_SELECTOR, ".sec .toggle").click()
        wait(viewer, lambda v: v.find_element(By.CSS_SELECTOR, ".sec .toggle").get_attribute("aria-expanded") == "false")
        assert owner.find_element(By.CSS_SELECTOR, ".sec .toggle").get_attribute("aria-expanded") == "true"
        # With tokens the server keeps the view per member: a reload finds it again.
        viewer.refresh()
        wait(viewer, lambda v: "My view" in v.find_element(By.ID, "view-state").text
             and v.find_element(By.CSS_SELECTOR, f'section[data-sec="{key}"] .toggle').get_attribute("aria-expanded") == "false",
             timeout=10)
    finally:
        s.stop()


def test_find_says_no_matches_and_escape_leaves_no_active_descendant(server, browsers, session_name):
    seed(server, session_name, [FRUIT, NUTS])  # Nuts collapsed: the server is asked too
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    find = b.find_element(By.ID, "find")
    find.send_keys("zzz")
    wait(b, lambda b: b.find_element(By.ID, "find-none").text == "No matches")
    assert not b.find_element(By.ID, "results").is_displayed()
    find.send_keys(Keys.CONTROL, "a")
    find.send_keys(Keys.BACKSPACE, "app")
    wait(b, lambda b: "Apple" in b.find_element(By.ID, "results").text)
    assert b.find_element(By.ID, "find-none").text == ""
    assert find.get_attribute("aria-activedescendant") == "hit0"
    find.send_keys(Keys.ESCAPE)
    wait(b, lambda b: not b.find_element(By.ID, "results").is_displayed())
    assert find.get_attribute("aria-activedescendant") is None
    assert b.find_element(By.ID, "find-box").get_attribute("aria-expanded") == "false"
    # Picking a match does not leave it behind either.
    find.send_keys(Keys.BACKSPACE, "p")
    wait(b, lambda b: b.find_element(By.ID, "results").is_displayed())
    find.send_keys(Keys.ENTER)
    wait(b, lambda b: b.find_element(By.ID, "find").get_attribute("aria-activedescendant") is None)
    assert b.find_element(By.ID, "find-none").text == ""
    # The query still pending when Enter picked a match (the server is asked 150 ms after
    # typing) is dropped: its answer must not open the list again over the picked row.
    time.sleep(1.0)
    assert not b.find_element(By.ID, "results").is_displayed()
    assert find.get_attribute("aria-activedescendant") is None


def test_the_options_panel_fits_a_390px_screen(server, browsers, session_name):
    seed(server, session_name, [FRUIT])
    b = browsers(width=390, height=800)
    open_as(b, server, "ana", f"/s/{session_name}")
    b.find_element(By.ID, "edit").click()
    wait(b, lambda b: b.find_element(By.ID, "options").is_displayed())
    box = lambda css: b.execute_script("return document.querySelector(arguments[0]).getBoundingClientRect().toJSON()", css)
    fieldset, width = box("#options fieldset"), b.execute_script("return document.documentElement.clientWidth")
    assert fieldset["right"] <= width
    for css in ("#opt-threshold", "#opt-lines", "#opt-collapsed", "#opt-expanded"):
        field = box(css)
        assert fieldset["left"] <= field["left"] and field["right"] <= fieldset["right"], css
    assert b.execute_script("return document.documentElement.scrollWidth") <= width


COUNT_LISTS = """
    // Counts the `list` messages this page sends (window.lists), from before its own scripts run.
    window.lists = 0;
    const send = WebSocket.prototype.send;
    WebSocket.prototype.send = function (data) {
      if (String(data).includes('"type":"list"')) window.lists++;
      return send.call(this, data);
    };
    window.closes = [];
    const close = Object.getOwnPropertyDescriptor(WebSocket.prototype, 'onclose');
    Object.defineProperty(WebSocket.prototype, 'onclose', {
      set(f) { close.set.call(this, (e) => { window.closes.push(e.code); return f && f(e); }); },
      get() { return close.get.call(this); },
    });
"""


def test_on_a_server_with_tokens_the_lobby_asks_once_and_a_refusal_stays_final_until_asked_again(browsers, tmp_path):
    (tmp_path / "secret").write_text(os.urandom(32).hex())
    s = Server(extra=["--token-secret-file", str(tmp_path / "secret")]).start()
    try:
        b = browsers()
        b.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": COUNT_LISTS})
        b.get(s.url + "/")
        wait(b, lambda b: "only with a token" in b.find_element(By.ID, "note").text, timeout=10)
        time.sleep(5)  # past the lobby's next periodic ask (every 4 s)
        assert b.execute_script("return window.lists") == 1
        assert b.execute_script("return window.closes") == []
        assert not b.find_element(By.ID, "banner").is_displayed()
        # The person asks again: one more list, one more refusal, and still open.
        b.find_element(By.CSS_SELECTOR, "#note button").click()
        wait(b, lambda b: b.execute_script("return window.lists") == 2)
        wait(b, lambda b: "only with a token" in b.find_element(By.ID, "note").text)
        time.sleep(1)
        assert b.execute_script("return window.lists") == 2
        assert b.execute_script("return window.closes") == []
    finally:
        s.stop()


def test_the_busy_indicator_spans_the_header_and_stands_still_under_reduced_motion(browsers):
    import signal
    for calm in (False, True):
        s = Server().start()  # a fresh demo each time: its large section collapsed
        try:
            b = browsers()
            if calm:
                b.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-reduced-motion", "value": "reduce"}]})
            open_as(b, s, "ana", "/s/demo")
            # Frozen, the server cannot send the rows: the page's own indicator shows after 0.5 s.
            os.kill(s.proc.pid, signal.SIGSTOP)
            try:
                head(b, "big").click()
                wait(b, lambda b: b.find_element(By.CSS_SELECTOR, 'section[data-sec="big"]').get_attribute("aria-busy") == "true")
                spin = head(b, "big").find_element(By.CSS_SELECTOR, ".spin")
                header = b.find_element(By.CSS_SELECTOR, 'section[data-sec="big"] .head')
                assert spin.is_displayed() and spin.size["width"] >= header.size["width"] - 1
                assert head(b, "big").find_element(By.CSS_SELECTOR, ".spin-text").text == "Loading rows…"
                moving = b.execute_script("return getComputedStyle(arguments[0], '::before').animationName", spin)
                assert moving == ("none" if calm else "sweep")
            finally:
                os.kill(s.proc.pid, signal.SIGCONT)
            wait(b, lambda b: b.find_element(By.CSS_SELECTOR, 'section[data-sec="big"]').get_attribute("aria-busy") == "false", timeout=30)
            assert not head(b, "big").find_element(By.CSS_SELECTOR, ".spin").is_displayed()
        finally:
            s.stop()
