"""Accessibility, checked by a real auditor: axe-core (from PyPI's axe-selenium-python) on the
lobby and on a session page, normal and in edit mode, must find no violation. No rule is turned
off: a finding is fixed in the page."""
from axe_selenium_python import Axe  # `make venv` installs it
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import Peer, seed
from test_web import FRUIT, NUTS, VEG, open_as, wait


def violations(b):
    axe = Axe(b)
    axe.inject()
    results = axe.run()
    found = results["violations"]
    assert found == [], axe.report(found)
    return results


def test_the_lobby_has_no_accessibility_violations(server, browsers, session_name):
    seed(server, session_name, [FRUIT])
    b = browsers()
    open_as(b, server, "ana", "/")
    wait(b, lambda b: any(session_name in li.text for li in b.find_elements(By.CSS_SELECTOR, "#sessions li")))
    results = violations(b)
    assert len(results["passes"]) > 10  # it did run its rules


def test_a_session_page_has_no_accessibility_violations_normal_or_in_edit_mode(server, browsers):
    b = browsers()
    open_as(b, server, "ana", "/s/demo")
    wait(b, lambda b: len(b.find_elements(By.CSS_SELECTOR, ".sec")) >= 10)
    violations(b)
    # With the find box open on a list of matches (the combobox expanded).
    b.find_element(By.ID, "find").send_keys("ip")
    wait(b, lambda b: b.find_element(By.ID, "results").is_displayed())
    assert b.find_element(By.ID, "find-box").get_attribute("aria-expanded") == "true"
    violations(b)
    b.find_element(By.ID, "find").clear()
    # Edit mode: inputs and buttons on every section and row, and the options panel.
    b.find_element(By.ID, "edit").click()
    wait(b, lambda b: b.find_element(By.ID, "options").is_displayed()
         and b.find_elements(By.CSS_SELECTOR, ".sec .tools input"))
    violations(b)


def test_a_session_with_long_titles_cut_to_one_line_has_no_accessibility_violations(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG, NUTS, {"key": "long", "title": "A title that goes on " * 10}])
    p = Peer(server, session_name)
    try:
        p.send({"type": "setOptions", "options": {"titleLines": 1, "collapsedIndicator": "▸", "expandedIndicator": "▾"}})
    finally:
        p.close()
    b = browsers(width=400, height=800)
    open_as(b, server, "ana", f"/s/{session_name}")
    wait(b, lambda b: "clamp" in b.find_element(By.ID, "table").get_attribute("class"))
    violations(b)


def test_after_find_and_escape_and_in_dark_mode_there_are_no_accessibility_violations(server, browsers):
    b = browsers()
    b.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    open_as(b, server, "ana", "/s/demo")
    wait(b, lambda b: len(b.find_elements(By.CSS_SELECTOR, ".sec")) >= 10)
    # Dark for real: the page's own colours changed, not only the browser's.
    assert b.execute_script("return getComputedStyle(document.documentElement).backgroundColor") != "rgb(255, 255, 255)"
    violations(b)
    # Find, then Escape: no active descendant left pointing at an option that is gone.
    find = b.find_element(By.ID, "find")
    find.send_keys("ip")
    wait(b, lambda b: b.find_element(By.ID, "results").is_displayed())
    find.send_keys(Keys.ESCAPE)
    wait(b, lambda b: not b.find_element(By.ID, "results").is_displayed())
    violations(b)
    # Nothing found: the "No matches" status.
    find.send_keys("zzzz")
    wait(b, lambda b: b.find_element(By.ID, "find-none").text == "No matches")
    violations(b)
    find.clear()
    b.find_element(By.ID, "edit").click()
    wait(b, lambda b: b.find_elements(By.CSS_SELECTOR, ".sec .tools textarea"))
    violations(b)


def test_a_private_view_with_shared_markers_the_activity_panel_and_the_undo_toast_have_no_accessibility_violations(server, browsers, session_name):
    seed(server, session_name, [FRUIT, VEG, NUTS])
    b = browsers()
    open_as(b, server, "ana", f"/s/{session_name}")
    wait(b, lambda b: b.find_element(By.ID, "my-view"), timeout=10).click()
    wait(b, lambda b: b.find_element(By.ID, "back-shared").is_displayed(), timeout=10)
    p = Peer(server, session_name, name="bo")
    try:
        p.send({"type": "set", "section": "veg", "collapsed": True})
    finally:
        p.close()
    wait(b, lambda b: "collapsed for everyone" in b.find_element(By.CSS_SELECTOR, 'section[data-sec="veg"] .toggle').text, timeout=10)
    # Each control is waited for: on a loaded machine the page may not have drawn it yet (edit
    # mode redraws the sections with their remove buttons after the click).
    wait(b, lambda b: b.find_element(By.CSS_SELECTOR, "#activity summary"), timeout=10).click()
    wait(b, lambda b: b.find_elements(By.CSS_SELECTOR, "#activity-list li"), timeout=10)
    wait(b, lambda b: b.find_element(By.ID, "edit"), timeout=10).click()
    wait(b, lambda b: b.find_element(By.CSS_SELECTOR, 'section[data-sec="nuts"] [data-act="remove"]'), timeout=10).click()
    wait(b, lambda b: b.find_element(By.ID, "toast").is_displayed(), timeout=10)
    violations(b)


def test_the_open_share_dialog_has_no_accessibility_violations(browsers, session_name, tmp_path):
    """The owners' Share dialog (a server with tokens), open with a minted link and its list."""
    import os
    import time

    from conftest import Server
    from test_table_options import hs256
    secret = os.urandom(32).hex()
    (tmp_path / "secret").write_text(secret)
    s = Server(extra=["--token-secret-file", str(tmp_path / "secret")]).start()
    try:
        claims = {"sub": "olga", "name": "Olga", "sessions": [session_name], "role": "owner", "exp": int(time.time()) + 600}
        b = browsers()
        b.get(f"{s.url}/s/{session_name}?new&token={hs256(claims, secret)}")
        wait(b, lambda b: b.find_element(By.ID, "share-open").is_displayed(), timeout=10)
        b.find_element(By.ID, "share-open").click()
        wait(b, lambda b: b.find_element(By.ID, "share-dialog").get_attribute("open") is not None)
        violations(b)
        b.find_element(By.ID, "share-create").click()
        wait(b, lambda b: b.find_elements(By.CSS_SELECTOR, "#share-invites button"))
        violations(b)
    finally:
        s.stop()
