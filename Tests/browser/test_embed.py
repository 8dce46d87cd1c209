"""The embeddable table: a page on ANOTHER origin (a small Python web server on 127.0.0.2, which is
a different origin from foldtabled's 127.0.0.1) includes /embed.js from foldtabled and a
<fold-table>. With that origin in --embed-origins the element shows the session live, both ways,
folds with the page's keys and passes axe-core inside its shadow root, and the site's own script
can use the documented protocol module; with the origin not listed
the browser refuses the script (CORS), and a copy of the script served by the site itself is
refused by the server (the WebSocket gets 403). With tokens, the element's token attribute is the
one its join carries."""
import functools
import http.server
import json
import os
import shutil
import threading
import time

import pytest
from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from conftest import WEB, Server, seed, snapshot
from test_accessibility import violations
from test_table_options import hs256
from test_web import FRUIT, NUTS, VEG, click_still, expanded, open_as, press, wait


class Site:
    """Another origin: a static web server on 127.0.0.2 (loopback, yet not 127.0.0.1's origin)
    serving the files of one directory, the host pages a test writes there."""

    def __init__(self, root):
        self.root = root
        handler = functools.partial(Quiet, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.2", 0), handler)
        self.origin = f"http://127.0.0.2:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def page(self, name, body, script):
        """A host page with a module script from `script` and `body` in its main landmark."""
        (self.root / name).write_text(
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>A blog</title>\n'
            f'<script type="module" src="{script}"></script></head>\n'
            f'<body><main><h1>A post with a live table</h1>\n{body}\n</main></body></html>\n')
        return f"{self.origin}/{name}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    s = Site(root)
    yield s
    s.close()


def element(b, css, *inside):
    """An element inside the shadow root of the <fold-table> matching `inside[0]` (default: the first)."""
    return b.execute_script(
        "const host = document.querySelector(arguments[1] || 'fold-table');"
        "return host && host.shadowRoot && host.shadowRoot.querySelector(arguments[0])", css, *(inside or (None,)))


def press_in(b, css, *inside, timeout=5):
    """Clicks an element inside a <fold-table> like a person: once neither element's rows move it
    (a fold in one element moves the other), retrying while something covers it, and checking the
    click reached it (one that landed elsewhere would make a test fail far from its cause)."""
    def attempt(b):
        target = element(b, css, *inside)
        b.execute_script(
            "const el = arguments[0]; window.__reached = null;"
            "document.addEventListener('click', (e) => { window.__reached = e.composedPath().includes(el); },"
            " { capture: true, once: true });", target)
        click_still(b, target)
        reached = b.execute_script("return window.__reached")
        assert reached, f"the click meant for {css} in {inside or 'fold-table'} landed elsewhere ({reached})"
        return True
    WebDriverWait(b, timeout, poll_frequency=0.05,
                  ignored_exceptions=[StaleElementReferenceException, ElementClickInterceptedException]).until(attempt)


def elements(b, css, host=None):
    return b.execute_script(
        "const h = document.querySelector(arguments[1] || 'fold-table');"
        "return h && h.shadowRoot ? [...h.shadowRoot.querySelectorAll(arguments[0])] : []", css, host)


def state(b, host="fold-table"):
    return b.execute_script("return document.querySelector(arguments[0]).getAttribute('state')", host)


def status_text(b, host="fold-table"):
    return b.execute_script("return document.querySelector(arguments[0]).shadowRoot.querySelector('.status').textContent", host)


def embedded_expanded(b, key, host=None):
    return element(b, f'section[data-sec="{key}"] .toggle', host).get_attribute("aria-expanded") == "true"


def collapsed_on_server(server, session, token=None):
    """Each section's shared collapsed state, as a fresh member (with `token`, if given) is welcomed."""
    if token is None:
        table = snapshot(server, session)
    else:
        from websockets.sync.client import connect
        with connect(server.ws_url, open_timeout=5) as ws:
            ws.send(json.dumps({"type": "join", "session": session, "name": "observer", "token": token}))
            table = replies(ws, lambda m: m["type"] == "welcome")["table"]
    return {s["key"]: s["collapsed"] for s in table["sections"]}


def test_a_listed_site_shows_the_table_live_both_ways_with_the_pages_keys_and_no_accessibility_violations(
        browsers, site, session_name):
    s = Server(extra=["--embed-origins", site.origin]).start()
    try:
        seed(s, session_name, [FRUIT, VEG, NUTS])
        url = site.page("post.html", f'<fold-table src="{s.url}/s/{session_name}" name="blog-reader">'
                        '<p>The table could not be loaded.</p></fold-table>', f"{s.url}/embed.js")
        blog = browsers()
        blog.get(url)
        wait(blog, lambda b: state(b) == "open" and len(elements(b, ".sec")) == 3, timeout=10)
        assert [e.text for e in elements(blog, ".sec .title")] == ["Fruit", "Vegetables", "Nuts"]
        assert [e.text for e in elements(blog, 'section[data-sec="fruit"] li.row .label')] == ["Apple", "Pear", "Plum"]
        assert element(blog, ".frame").is_displayed() and element(blog, ".name").text == session_name
        # The host page's own content stays as it was; the element's fallback is not shown.
        assert blog.find_element("css selector", "h1").text == "A post with a live table"
        assert not blog.find_element("css selector", "fold-table p").is_displayed()
        violations(blog)

        page = browsers()
        open_as(page, s, "ana", f"/s/{session_name}")
        # A toggle in the page's window appears in the embedded table...
        press(page, "fruit")
        wait(blog, lambda b: not embedded_expanded(b, "fruit"))
        # ...and one in the embedded table reaches the page (and the server).
        press_in(blog, 'section[data-sec="veg"] .toggle')
        wait(page, lambda p: not expanded(p, "veg"))
        wait(blog, lambda b: collapsed_on_server(s, session_name)["veg"] is True)
        # The keyboard as on the page: Enter opens the focused header's section (its rows stream
        # in), the arrows walk the headers, Space folds.
        nuts = element(blog, 'section[data-sec="nuts"] .toggle')
        blog.execute_script("arguments[0].focus()", nuts)
        ActionChains(blog).send_keys(Keys.ENTER).perform()
        wait(blog, lambda b: [e.text for e in elements(b, 'section[data-sec="nuts"] li.row .label')] == ["Pecan"])
        wait(page, lambda p: expanded(p, "nuts"))
        ActionChains(blog).send_keys(Keys.ARROW_UP).perform()
        focused = blog.execute_script("return document.querySelector('fold-table').shadowRoot.activeElement")
        assert focused == element(blog, 'section[data-sec="veg"] .toggle')
        ActionChains(blog).send_keys(Keys.SPACE).perform()
        wait(page, lambda p: expanded(p, "veg"))
        assert embedded_expanded(blog, "veg") and embedded_expanded(blog, "nuts")
        # Same ARIA as the page: each header button controls its section's body.
        toggle = element(blog, 'section[data-sec="veg"] .toggle')
        body = element(blog, "#" + toggle.get_attribute("aria-controls"))
        assert body is not None and body.get_attribute("class") == "body"
        violations(blog)
        # Taken out of its page, the element leaves the session (its member goes from the list).
        wait(page, lambda p: "blog-reader" in p.find_element("id", "people").text)
        blog.execute_script("document.querySelector('fold-table').remove()")
        wait(page, lambda p: "blog-reader" not in p.find_element("id", "people").text, timeout=10)
    finally:
        s.stop()


def test_a_listed_sites_own_script_uses_the_documented_protocol_module(browsers, site, session_name):
    s = Server(extra=["--embed-origins", site.origin]).start()
    try:
        seed(s, session_name, [FRUIT, VEG])
        # The protocol article's example, nearly word for word, as the site's own module.
        (site.root / "mine.js").write_text(f"""
import {{ Connection, socketURL }} from '{s.url}/protocol.js';
const seen = [];
const conn = new Connection({{
  url: socketURL('{s.url}/'),
  session: '{session_name}',
  token: null,
  name: 'release notes',
  onMessage(msg, entry) {{
    if (msg.type === 'event') seen.push([msg.seq, msg.by?.name, msg.change.type]);
    if (msg.type === 'ack') document.body.dataset.acked = entry.msg.id;
    document.body.dataset.seen = JSON.stringify(seen);
  }},
  onStatus(st) {{ document.body.dataset.state = st.state; }},
}});
conn.connect();
window.conn = conn;
document.querySelector('button').addEventListener('click', () => {{
  document.body.dataset.sent = conn.send({{ type: 'set', section: 'fruit', collapsed: true }});
}});
""")
        blog = browsers()
        blog.get(site.page("script.html", '<button type="button">Fold Fruit</button>', "/mine.js"))
        wait(blog, lambda b: b.execute_script("return document.body.dataset.state") == "open", timeout=10)
        blog.find_element("css selector", "button").click()
        wait(blog, lambda b: b.execute_script("return document.body.dataset.acked || null")
             == b.execute_script("return document.body.dataset.sent"))
        assert collapsed_on_server(s, session_name)["fruit"] is True
        # Events from others arrive through onMessage.
        page = browsers()
        open_as(page, s, "ana", f"/s/{session_name}")
        press(page, "veg")
        wait(blog, lambda b: ["ana", "set"] in [e[1:] for e in json.loads(b.execute_script("return document.body.dataset.seen"))])
        # close() is final: the member leaves, the outbox is gone, and nothing sends or connects again.
        wait(page, lambda p: "release notes" in p.find_element("id", "people").text)
        after = blog.execute_script("""
          const conn = window.conn;
          conn.close();
          let threw = false;
          try { conn.send({ type: 'set', section: 'veg', collapsed: true }); } catch { threw = true; }
          conn.connect();
          conn.retryNow();
          return { threw, queued: conn.outbox.size, socket: conn.ws !== null };
        """)
        assert after == {"threw": True, "queued": 0, "socket": False}
        wait(page, lambda p: "release notes" not in p.find_element("id", "people").text, timeout=10)
    finally:
        s.stop()


def test_two_elements_on_one_session_and_a_restarted_element_each_fold_for_real(browsers, site, session_name):
    # Every Connection in a page joins with the page's idScope: their change ids must not repeat,
    # or the server takes a second element's change for a retry of the first's and drops it.
    s = Server(extra=["--embed-origins", site.origin]).start()
    try:
        seed(s, session_name, [FRUIT, VEG, NUTS])
        src = f"{s.url}/s/{session_name}"
        blog = browsers()
        blog.get(site.page("two.html", f'<fold-table id="one" src="{src}" name="one"></fold-table>\n'
                           f'<fold-table id="two" src="{src}" name="two"></fold-table>', f"{s.url}/embed.js"))
        wait(blog, lambda b: state(b, "#one") == "open" and state(b, "#two") == "open"
             and elements(b, ".sec", "#one") and elements(b, ".sec", "#two"), timeout=10)
        press_in(blog, 'section[data-sec="fruit"] .toggle', "#one")
        wait(blog, lambda b: collapsed_on_server(s, session_name)["fruit"] is True)
        press_in(blog, 'section[data-sec="veg"] .toggle', "#two")
        wait(blog, lambda b: collapsed_on_server(s, session_name)["veg"] is True)
        # A new name restarts the element with a new Connection; its next fold still applies.
        blog.execute_script("document.querySelector('#one').setAttribute('name', 'one again')")
        wait(blog, lambda b: state(b, "#one") == "open" and elements(b, ".sec", "#one"), timeout=10)
        press_in(blog, 'section[data-sec="nuts"] .toggle', "#one")  # NUTS starts folded
        wait(blog, lambda b: collapsed_on_server(s, session_name)["nuts"] is False)
        assert collapsed_on_server(s, session_name) == {"fruit": True, "veg": True, "nuts": False}
    finally:
        s.stop()


def test_an_element_whose_src_was_wrong_starts_once_its_src_is_corrected(browsers, site, session_name):
    s = Server(extra=["--embed-origins", site.origin]).start()
    try:
        seed(s, session_name, [FRUIT])
        blog = browsers()
        blog.get(site.page("fix.html", f'<fold-table src="{s.url}/tables/{session_name}"></fold-table>', f"{s.url}/embed.js"))
        wait(blog, lambda b: state(b) == "fatal", timeout=10)
        assert "must be a session’s address" in status_text(blog)
        blog.execute_script("document.querySelector('fold-table').setAttribute('src', arguments[0])", f"{s.url}/s/{session_name}")
        wait(blog, lambda b: state(b) == "open" and len(elements(b, ".sec")) == 1, timeout=10)
        assert status_text(blog) == ""
    finally:
        s.stop()


@pytest.fixture
def other_site_listed():
    """A server that lists an origin other than the site's: refusals show the list discriminates."""
    s = Server(extra=["--embed-origins", "http://127.0.0.3:8000"]).start()
    yield s
    s.stop()


def test_a_site_not_listed_cannot_run_the_script_and_shows_its_own_fallback(browsers, site, other_site_listed, session_name):
    server = other_site_listed
    seed(server, session_name, [FRUIT])
    url = site.page("post.html", f'<fold-table src="{server.url}/s/{session_name}">'
                    '<p id="fallback">The table could not be loaded.</p></fold-table>', f"{server.url}/embed.js")
    blog = browsers()
    blog.get(url)
    # The browser refuses to run a cross-origin module script without the server's permission.
    wait(blog, lambda b: any("CORS" in entry["message"] for entry in b.get_log("browser")), timeout=10)
    assert blog.execute_script("return customElements.get('fold-table') === undefined")
    assert blog.find_element("id", "fallback").is_displayed()
    assert blog.execute_script("return document.querySelector('fold-table').shadowRoot") is None


def test_a_site_not_listed_with_its_own_copy_of_the_script_is_refused_by_the_server(browsers, site, other_site_listed, session_name):
    server = other_site_listed
    seed(server, session_name, [FRUIT])
    for name in ("embed.js", "protocol.js", "model.js", "table.js", "table.css", "embed.css"):
        shutil.copy(WEB / name, site.root / name)
    url = site.page("post.html", f'<fold-table src="{server.url}/s/{session_name}"></fold-table>', "/embed.js")
    blog = browsers()
    blog.get(url)
    # The script runs (it is the site's own), but the server refuses the WebSocket: the element
    # says so, and shows no table.
    wait(blog, lambda b: state(b) == "down", timeout=10)
    assert "refused this site" in status_text(blog)
    assert element(blog, ".status").is_displayed()
    assert elements(blog, ".sec") == []
    assert any("403" in entry["message"] for entry in blog.get_log("browser"))
    violations(blog)


def test_with_tokens_the_token_attribute_is_what_the_join_carries(browsers, site, session_name, tmp_path):
    secret = os.urandom(32).hex()
    (tmp_path / "secret").write_text(secret)
    s = Server(extra=["--token-secret-file", str(tmp_path / "secret"), "--embed-origins", site.origin]).start()
    try:
        def token(role, name):
            claims = {"sub": name, "name": name, "sessions": [session_name], "role": role, "exp": int(time.time()) + 600}
            return hs256(claims, secret)
        make(s, session_name, token("owner", "olga"))
        src = f"{s.url}/s/{session_name}"
        url = site.page("post.html",
                        f'<fold-table id="editor" src="{src}" token="{token("editor", "ed")}"></fold-table>\n'
                        f'<fold-table id="viewer" src="{src}" token="{token("viewer", "vic")}"></fold-table>\n'
                        f'<fold-table id="none" src="{src}"></fold-table>\n'
                        f'<fold-table id="forged" src="{src}" token="{token("editor", "eve")[:-2]}xx"></fold-table>',
                        f"{s.url}/embed.js")
        blog = browsers()
        blog.get(url)
        wait(blog, lambda b: state(b, "#editor") == "open" and state(b, "#viewer") == "open"
             and elements(b, ".sec", "#editor") and elements(b, ".sec", "#viewer"), timeout=10)
        # Without a valid token the join is refused for good, and the element says why.
        wait(blog, lambda b: state(b, "#none") == "fatal" and state(b, "#forged") == "fatal")
        assert "needs a valid token" in status_text(blog, "#none")
        assert "needs a valid token" in status_text(blog, "#forged")
        # An editor folds for everyone, the viewer's table too...
        press_in(blog, 'section[data-sec="fruit"] .toggle', "#editor")
        wait(blog, lambda b: collapsed_on_server(s, session_name, token("viewer", "obs"))["fruit"] is True)
        wait(blog, lambda b: not embedded_expanded(b, "fruit", "#viewer"))
        # ...while a viewer, who may not fold the shared view, folds its own.
        press_in(blog, 'section[data-sec="fruit"] .toggle', "#viewer")
        wait(blog, lambda b: embedded_expanded(b, "fruit", "#viewer"))
        # The server keeps that fold in the viewer's own view (a fresh join as the viewer gets it
        # back), and only then is the shared state's fold known to have been left alone.
        wait(blog, lambda b: (private_view(s, session_name, token("viewer", "vic")) or {}).get("fruit") is False)
        assert collapsed_on_server(s, session_name, token("viewer", "obs"))["fruit"] is True
        assert not embedded_expanded(blog, "fruit", "#editor")
        assert state(blog, "#viewer") == "open"  # not closed for refused changes
        violations(blog)
        # Dark mode follows the system inside the element too, with the page's contrast.
        blog.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        wait(blog, lambda b: b.execute_script(
            "return getComputedStyle(document.querySelector('#editor')).backgroundColor") != "rgb(255, 255, 255)")
        violations(blog)
    finally:
        s.stop()


def private_view(server, session, token):
    """The `collapsed` of the private view a fresh join with `token` gets back after its welcome,
    or None when none comes within a second."""
    from websockets.sync.client import connect
    with connect(server.ws_url, open_timeout=5) as ws:
        ws.send(json.dumps({"type": "join", "session": session, "name": "observer", "token": token}))
        # The welcome and the view may come in one message, one line each: read line by line.
        welcomed = False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                raw = ws.recv(timeout=max(0, deadline - time.monotonic()))
            except TimeoutError:
                return None
            for line in filter(str.strip, raw.split("\n")):
                m = json.loads(line)
                if m["type"] == "welcome":
                    welcomed, deadline = True, time.monotonic() + 1
                elif welcomed and m["type"] == "view":
                    return m.get("collapsed") if m.get("mode") == "private" else None
        return None


def make(server, session, token):
    """Creates `session` with FRUIT's section as the owner of `token`."""
    from websockets.sync.client import connect
    with connect(server.ws_url, open_timeout=5) as ws:
        ws.send(json.dumps({"type": "join", "session": session, "name": "olga", "token": token, "create": True}))
        replies(ws, lambda m: m["type"] == "welcome")
        ws.send(json.dumps({"type": "addSection", "key": "fruit", "title": "Fruit", "id": "s1"}))
        assert replies(ws, lambda m: m.get("id") == "s1" and m["type"] in ("ack", "error"))["type"] == "ack"


def replies(ws, pred):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in ws.recv(timeout=deadline - time.monotonic()).split("\n"):
            if line.strip() and pred(json.loads(line)):
                return json.loads(line)
    raise TimeoutError("no such reply")
