"""My view, undo and the activity panel, in two real Chromium windows: a member's own view leaves
the other window alone, back to shared shows the shared state, Ctrl+Z takes a change back for
everyone, and the activity panel names who did what."""
import time

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import Peer, seed, snapshot
from test_web import FRUIT, VEG, edit_mode, expanded, head, open_as, press, section_titles, wait


def shared_state(server, session):
    return {s["key"]: s["collapsed"] for s in snapshot(server, session)["sections"]}


def go_private(b):
    b.find_element(By.ID, "my-view").click()
    wait(b, lambda b: "My view" in b.find_element(By.ID, "view-state").text and b.find_element(By.ID, "back-shared").is_displayed())


def test_a_private_toggle_leaves_the_other_window_alone_and_back_to_shared_restores_the_shared_state(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    assert "Shared view" in a.find_element(By.ID, "view-state").text
    go_private(a)
    press(a, "fruit")
    wait(a, lambda a: not expanded(a, "fruit"))
    time.sleep(1)  # time enough for a broadcast to reach the other window, were there one
    assert expanded(b, "fruit")
    assert shared_state(server, session_name) == {"fruit": False, "veg": False}
    # Someone else's toggle changes the shared state: a quiet marker here, not this view.
    press(b, "veg")
    wait(a, lambda a: "collapsed for everyone" in head(a, "veg").text)
    assert expanded(a, "veg")
    # Back to the shared view in one click: the shared state, whatever this view had.
    a.find_element(By.ID, "back-shared").click()
    wait(a, lambda a: expanded(a, "fruit") and not expanded(a, "veg"))
    assert "Shared view" in a.find_element(By.ID, "view-state").text
    assert not a.find_element(By.ID, "back-shared").is_displayed()
    assert "for everyone" not in head(a, "veg").text
    # And shared again: a toggle reaches the other window.
    press(a, "fruit")
    wait(b, lambda b: not expanded(b, "fruit"))


def test_the_private_view_survives_a_reload_in_open_mode(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a = browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    go_private(a)
    press(a, "veg")
    wait(a, lambda a: not expanded(a, "veg"))
    wait(a, lambda a: a.execute_script(f"return localStorage.getItem('foldtable.view.{session_name}')") is not None)
    a.refresh()
    wait(a, lambda a: "here:" in a.find_element(By.ID, "people").text, timeout=10)
    wait(a, lambda a: "My view" in a.find_element(By.ID, "view-state").text and not expanded(a, "veg"))
    assert shared_state(server, session_name)["veg"] is False
    # Back to shared forgets it.
    ActionChains(a).key_down(Keys.ALT).key_down(Keys.SHIFT).send_keys("s").key_up(Keys.SHIFT).key_up(Keys.ALT).perform()
    wait(a, lambda a: expanded(a, "veg") and "Shared view" in a.find_element(By.ID, "view-state").text)
    assert a.execute_script(f"return localStorage.getItem('foldtable.view.{session_name}')") is None


def test_ctrl_z_after_adding_a_row_removes_it_in_both_windows_and_ctrl_shift_z_brings_it_back(server, browsers, session_name):
    seed(server, session_name, [FRUIT])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    labels = lambda w: [e.get_attribute("textContent") for e in
                        w.find_elements(By.CSS_SELECTOR, 'section[data-sec="fruit"] li.row:not(.leave) .label')]
    edit_mode(a)
    a.find_element(By.CSS_SELECTOR, 'section[data-sec="fruit"] [data-act="addrow"]').click()
    wait(b, lambda b: labels(b) == ["Apple", "Pear", "Plum", "New row"])
    # Ctrl+Z in a text field is the field's own; on the page it undoes.
    a.execute_script("document.activeElement.blur()")
    ActionChains(a).key_down(Keys.CONTROL).send_keys("z").key_up(Keys.CONTROL).perform()
    wait(b, lambda b: labels(b) == ["Apple", "Pear", "Plum"])
    a.find_element(By.ID, "edit").click()
    wait(a, lambda a: labels(a) == ["Apple", "Pear", "Plum"])
    ActionChains(a).key_down(Keys.CONTROL).key_down(Keys.SHIFT).send_keys("z").key_up(Keys.SHIFT).key_up(Keys.CONTROL).perform()
    wait(b, lambda b: labels(b) == ["Apple", "Pear", "Plum", "New row"])
    wait(a, lambda a: labels(a) == ["Apple", "Pear", "Plum", "New row"])
    # Nothing more to redo: said, and nothing changes.
    ActionChains(a).key_down(Keys.CONTROL).send_keys("y").key_up(Keys.CONTROL).perform()
    wait(a, lambda a: "nothing to redo" in a.find_element(By.ID, "note").text)
    assert len(snapshot(server, session_name)["sections"][0]["rows"]) == 4


def test_removing_a_section_shows_removed_undo_and_undo_brings_it_back_for_everyone(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    edit_mode(a)
    a.find_element(By.CSS_SELECTOR, 'section[data-sec="fruit"] [data-act="remove"]').click()
    wait(b, lambda b: section_titles(b) == ["Vegetables"])
    toast = a.find_element(By.ID, "toast")
    wait(a, lambda a: toast.is_displayed() and toast.text.startswith("Removed Fruit"))
    toast.find_element(By.TAG_NAME, "button").click()
    wait(b, lambda b: section_titles(b) == ["Fruit", "Vegetables"])
    assert not toast.is_displayed()
    table = snapshot(server, session_name)
    assert [r["key"] for r in table["sections"][0]["rows"]] == ["apple", "pear", "plum"]
    assert table["sections"][0]["footer"] == "Fresh daily"


def test_the_activity_panel_shows_the_other_windows_toggle_with_its_name(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    a, b = browsers(), browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    open_as(b, server, "bo", f"/s/{session_name}")
    a.find_element(By.CSS_SELECTOR, "#activity summary").click()
    entries = lambda a: [li.text for li in a.find_elements(By.CSS_SELECTOR, "#activity-list li")]
    press(b, "fruit")
    wait(a, lambda a: entries(a) and entries(a)[0] == "bo collapsed Fruit · just now")
    assert a.find_element(By.ID, "activity-list").get_attribute("aria-label") == "Recent changes"
    # Relative times move on: an entry of ten minutes ago says so (refreshed every half minute,
    # and whenever the panel opens).
    a.execute_script("document.querySelector('#activity-list li time').dataset.ms = Date.now() - 10 * 60 * 1000")
    summary = a.find_element(By.CSS_SELECTOR, "#activity summary")
    summary.click()
    summary.click()
    wait(a, lambda a: entries(a)[0] == "bo collapsed Fruit · 10 min ago")


def test_the_activity_panel_starts_with_what_happened_before_the_page_opened(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG])
    p = Peer(server, session_name, name="cy")
    try:
        p.send({"type": "set", "section": "veg", "collapsed": True})
    finally:
        p.close()
    a = browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    a.find_element(By.CSS_SELECTOR, "#activity summary").click()
    entries = lambda a: [li.text for li in a.find_elements(By.CSS_SELECTOR, "#activity-list li")]
    # From the server's history, newest first, each with its author.
    wait(a, lambda a: len(entries(a)) >= 3)
    assert entries(a)[0] == "cy collapsed Vegetables · just now"
    assert any(e.startswith("seeder added section Vegetables · ") for e in entries(a))
    assert a.find_element(By.CSS_SELECTOR, "#activity-list li time").get_attribute("datetime")


def test_an_in_place_edit_closed_without_a_change_sends_none_so_there_is_nothing_to_undo(server, browsers, session_name):
    seed(server, session_name, [FRUIT])
    a = browsers()
    open_as(a, server, "ana", f"/s/{session_name}")
    value = lambda: a.find_element(By.CSS_SELECTOR, 'li[data-row="apple"] .value')
    # Typed and taken back, then Enter; and typed then Escape at once.
    value().click()
    ActionChains(a).send_keys(Keys.END, "x", Keys.BACKSPACE, Keys.ENTER).perform()
    value().click()
    ActionChains(a).send_keys("zz", Keys.ESCAPE).perform()
    wait(a, lambda a: not a.find_elements(By.CSS_SELECTOR, ".in-value") and value().text == "red")
    ActionChains(a).key_down(Keys.CONTROL).send_keys("z").key_up(Keys.CONTROL).perform()
    wait(a, lambda a: "nothing of yours to undo" in a.find_element(By.ID, "note").text)
    assert value().text == "red"
