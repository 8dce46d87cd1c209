"""The owners' "Share..." dialog in a real Chromium: it mints an invite whose link opens the session
in a second window with the invited role, lists it, and withdraws it (the second window is closed
with 4503 and says so)."""
import os
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from conftest import Server
from test_table_options import hs256
from test_web import wait


def owner_page(browsers, server, session, secret):
    claims = {"sub": "olga", "name": "Olga", "sessions": [session], "role": "owner", "exp": int(time.time()) + 600}
    b = browsers()
    b.get(f"{server.url}/s/{session}?new&token={hs256(claims, secret)}")
    wait(b, lambda b: "here:" in b.find_element(By.ID, "people").text, timeout=10)
    return b


def test_the_share_dialog_mints_a_link_that_opens_the_session_with_the_role_and_withdraws_it(browsers, session_name, tmp_path):
    secret = os.urandom(32).hex()
    (tmp_path / "secret").write_text(secret)
    s = Server(extra=["--token-secret-file", str(tmp_path / "secret")]).start()
    try:
        owner = owner_page(browsers, s, session_name, secret)
        opener = owner.find_element(By.ID, "share-open")
        wait(owner, lambda o: opener.is_displayed())
        opener.click()
        dialog = owner.find_element(By.ID, "share-dialog")
        wait(owner, lambda o: dialog.get_attribute("open") is not None)
        # Focus moves into the dialog, on its first field.
        assert owner.switch_to.active_element.get_attribute("id") == "share-role"
        Select(owner.find_element(By.ID, "share-role")).select_by_value("editor")
        owner.find_element(By.ID, "share-label").send_keys("for Bo")
        owner.find_element(By.ID, "share-create").click()
        wait(owner, lambda o: "#token=" in o.find_element(By.ID, "share-url").get_attribute("value"))
        link = owner.find_element(By.ID, "share-url").get_attribute("value")
        assert link.startswith(f"{s.url}/s/{session_name}#token=")
        wait(owner, lambda o: "for Bo · editor" in o.find_element(By.ID, "share-invites").text)

        # The link in a second window: the session, as an editor (edit controls, no Share button),
        # and the token gone from the address bar.
        guest = browsers()
        guest.get(link)
        wait(guest, lambda g: "here:" in g.find_element(By.ID, "people").text, timeout=10)
        assert "token" not in guest.current_url
        assert guest.find_element(By.ID, "edit").is_displayed()
        assert not guest.find_element(By.ID, "share-open").is_displayed()

        # Withdrawn from the dialog: the guest's page is closed with 4503 and says why.
        owner.find_element(By.CSS_SELECTOR, "#share-invites button").click()
        wait(owner, lambda o: "Withdrew for Bo" in o.find_element(By.ID, "share-status").text)
        wait(owner, lambda o: o.find_elements(By.CSS_SELECTOR, "#share-invites li") == [])
        wait(guest, lambda g: "withdrew the link" in g.find_element(By.ID, "banner").text, timeout=10)
        # A reload would not offer the withdrawn token again: the tab forgot it.
        assert guest.execute_script("return sessionStorage.getItem('foldtable-token')") is None
        owner.find_element(By.ID, "share-close").click()
        wait(owner, lambda o: dialog.get_attribute("open") is None)
    finally:
        s.stop()


def test_only_an_owner_sees_the_share_button(browsers, session_name, tmp_path):
    secret = os.urandom(32).hex()
    (tmp_path / "secret").write_text(secret)
    s = Server(extra=["--token-secret-file", str(tmp_path / "secret")]).start()
    try:
        owner = owner_page(browsers, s, session_name, secret)
        wait(owner, lambda o: o.find_element(By.ID, "share-open").is_displayed())
        claims = {"sub": "ed", "name": "Ed", "sessions": [session_name], "role": "editor", "exp": int(time.time()) + 600}
        editor = browsers()
        editor.get(f"{s.url}/s/{session_name}?token={hs256(claims, secret)}")
        wait(editor, lambda e: "here:" in e.find_element(By.ID, "people").text, timeout=10)
        assert not editor.find_element(By.ID, "share-open").is_displayed()
    finally:
        s.stop()
