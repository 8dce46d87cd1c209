// <fold-table src="https://tables.example.com/s/demo" token="…">: a live Foldtable table in
// another site's page. A custom element with its own shadow root, drawn by the page's own
// table.js from the page's own model.js over the page's own protocol.js, so it folds with the
// same keys (Enter and Space on a header, arrows between headers) and ARIA as the page does.
//
// The site's origin must be in the server's --embed-origins: module scripts are fetched in CORS
// mode, so only a listed origin's page can run this file (and what it imports), and only a
// listed origin may open the WebSocket. No inline script or style: the styles are this server's
// table.css and embed.css, linked into the shadow root.
//
// Attributes (read again whenever one changes):
//   src    the session's address on the server, https://host/s/NAME (required)
//   token  a token for that session, when the server uses tokens (a viewer's folds stay its own)
//   name   the name others see for this member (default: guest-xxxx)
// The token is in the host page for every visitor to read and reuse: give a viewer token for
// that one session with a short expiry (the element warns in the console about any other role).
// In open mode there is no token, and every reader of the site folds the shared view for everyone.
// The element reflects its connection in its `state` attribute: connecting, open, down or fatal.
import { Connection, closeSentence, socketURL } from './protocol.js';
import { Table } from './model.js';
import { TableView } from './table.js';

const SESSION_PATH = /^\/s\/([A-Za-z0-9_-]{1,64})\/?$/;

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

/** The `<fold-table>` element: one member's live view of one session. */
export class FoldTable extends HTMLElement {
  static observedAttributes = ['src', 'token', 'name'];

  constructor() {
    super();
    const shadow = this.attachShadow({ mode: 'open' });
    // Shown once its styles are in (or failed: then plain, rather than nothing), so the host page
    // never flashes an unstyled table.
    this.frame = el('div', 'frame');
    this.frame.hidden = true;
    let waiting = 2;
    const styled = () => { if (--waiting === 0) this.frame.hidden = false; };
    for (const file of ['table.css', 'embed.css']) {
      const link = el('link');
      link.rel = 'stylesheet';
      link.href = new URL(file, import.meta.url).href;
      link.addEventListener('load', styled);
      link.addEventListener('error', styled);
      shadow.append(link);
    }
    this.bar = el('div', 'bar');
    this.nameLink = el('a', 'name');
    this.people = el('span', 'people');
    this.bar.append(this.nameLink, this.people);
    // The connection's state in words, for everyone (a status region: read when it changes).
    this.statusLine = el('p', 'status');
    this.statusLine.setAttribute('role', 'status');
    this.live = el('div', 'sr-only');
    this.live.setAttribute('aria-live', 'polite');
    this.frame.append(this.bar, this.statusLine);
    shadow.append(this.frame, this.live);
    this.run = null;
    this.placed = false; // in a document, between connectedCallback and disconnectedCallback
  }

  connectedCallback() { this.placed = true; this.start(); }

  disconnectedCallback() { this.placed = false; this.stop(); }

  // Any change while placed starts over, whether or not a run is going: a `src` that was not a
  // session's address (no run, a fatal message) must work once it is corrected. Before
  // connectedCallback (an upgrade reports each attribute first) there is nothing to restart.
  attributeChangedCallback(name, old, value) {
    if (old !== value && this.placed) { this.stop(); this.start(); }
  }

  stop() {
    this.run?.stop();
    this.run = null;
  }

  start() {
    if (!this.isConnected || this.run) return;
    let address;
    try { address = new URL(this.getAttribute('src') ?? '', document.baseURI); } catch { address = null; }
    const route = address && SESSION_PATH.exec(address.pathname);
    if (!route) {
      this.tableEl?.remove();
      this.tableEl = null;
      this.show('fatal', 'This table’s src must be a session’s address, like https://tables.example.com/s/demo.');
      return;
    }
    this.run = new EmbeddedSession(this, address, route[1]);
  }

  /** Shows the connection's state: in words (none when open) and in the `state` attribute. */
  show(state, text) {
    this.setAttribute('state', state);
    this.statusLine.classList.toggle('fatal', state === 'fatal');
    if (this.statusLine.textContent !== text) this.statusLine.textContent = text;
  }
}

/** One run of a <fold-table>: its connection, its table and its drawing, until stop(). */
class EmbeddedSession {
  constructor(host, address, session) {
    this.host = host;
    const server = address.host;
    host.nameLink.textContent = session;
    host.nameLink.href = address.href;
    host.nameLink.title = `Open the whole table on ${server}`;
    host.people.textContent = '';
    const tableEl = el('div', 'table');
    host.tableEl?.remove();
    host.tableEl = tableEl;
    host.frame.append(tableEl);

    const table = (this.table = new Table());
    let role = null;
    let me = null;
    let loaded = false;
    let everOpen = false;
    // Sections this member asked to fold and shows that way until the server answers.
    const want = new Map();    // section key -> {collapsed, id}
    const waiting = new Map(); // section key -> ms: a spinner when rows take more than half a second
    const say = this.announcer(host.live);

    const ui = {
      editing: () => false,
      // An embedded table folds; it does not edit (that is the whole page's job).
      mayEdit: () => false,
      collapsedShown: (s) => (want.has(s.key) ? want.get(s.key).collapsed : s.collapsed),
      showsBusy: () => table.options.showBusyIndicator !== false,
      spinning(s) {
        const t = waiting.get(s.key);
        if (t === undefined) return false;
        if (ui.collapsedShown(s) || (table.complete(s) && !want.has(s.key))) { waiting.delete(s.key); return false; }
        return ui.showsBusy() && performance.now() - t >= 500 && !table.complete(s);
      },
      rowPending: () => false,
      send: (change) => { try { return this.conn.send(change); } catch { return null; } },
      moved() {},
      removeSection() {},
      // `set` rather than `toggle`: a press queued while offline means "expanded", not "flip
      // whatever it is by the time we are back". A viewer may not fold the shared view: its first
      // press asks for its own view (the server takes the messages in order, so the `set` right
      // behind applies there), and from then on it folds only for itself.
      toggle: (key) => {
        const s = table.section(key);
        if (!s) return;
        if (role === 'viewer' && table.mode !== 'private') this.conn.sendNow({ type: 'view', mode: 'private' });
        const collapsed = !ui.collapsedShown(s);
        const id = ui.send({ type: 'set', section: key, collapsed });
        if (!id) return;
        want.set(key, { collapsed, id });
        if (collapsed) waiting.delete(key);
        else { waiting.set(key, performance.now()); this.later(schedule, 520); }
        schedule();
      },
    };
    const view = new TableView(tableEl, ui);

    // Drawing is batched per frame; the timer also covers hidden windows, where frames stop.
    let raf = 0;
    let tid = 0;
    const schedule = () => {
      if (raf || tid || this.stopped) return;
      raf = requestAnimationFrame(draw);
      tid = setTimeout(draw, 100);
    };
    const draw = () => {
      cancelAnimationFrame(raf);
      clearTimeout(tid);
      raf = tid = 0;
      if (!loaded || this.stopped) return;
      view.render(table);
      for (const key of waiting.keys()) if (!table.section(key)) waiting.delete(key);
      if (waiting.size) this.later(schedule, 200);
    };
    this.cancelDraw = () => { cancelAnimationFrame(raf); clearTimeout(tid); };

    const settle = (entry) => {
      const m = entry?.msg;
      if (!m) return;
      for (const [key, w] of want) if (w.id === m.id) want.delete(key);
    };

    const fatal = {
      4501: 'This table was deleted.',
      4502: 'This table needs a valid token (the element’s token attribute).',
      session_not_found: `There is no table named “${session}” on ${server}.`,
    };
    this.conn = new Connection({
      url: socketURL(address),
      session,
      token: host.getAttribute('token') || null,
      name: () => host.getAttribute('name') || this.guest,
      canResume: () => !table.sections.some((s) => s.pending),
      onStatus: (st) => {
        if (st.state === 'open') {
          everOpen = true;
          host.show('open', '');
        } else if (st.state === 'fatal') {
          host.show('fatal', fatal[st.code] ?? `Disconnected by ${server}: ${closeSentence(st.code)}.`);
        } else if (st.state === 'down') {
          // Never open: the server refused this page (its origin not in --embed-origins) or
          // cannot be reached; the browser does not say which.
          host.show('down', everOpen ? 'Connection lost. Reconnecting…'
            : `Cannot connect to ${server}: it refused this site, or it cannot be reached. Trying again…`);
        } else {
          host.show('connecting', everOpen ? 'Reconnecting…' : `Connecting to ${server}…`);
        }
      },
      onMessage: (msg, entry) => {
        switch (msg.type) {
          case 'welcome':
            me = msg.client;
            role = msg.role ?? null;
            if (role && role !== 'viewer' && host.getAttribute('token') && !this.warned) {
              this.warned = true;
              console.warn(`<fold-table>: its token gives the role “${role}”, and every visitor of this page can read it. ` +
                'Use a viewer token for this one session with a short expiry.');
            }
            table.load(msg.table);
            view.views.forEach((v) => { v.v = -1; });
            want.clear();
            if (loaded) say('Reconnected. The table was reloaded from the server.');
            loaded = true;
            table.mode = 'shared';
            if (msg.view?.mode === 'private') table.applyView('private', msg.view.collapsed);
            this.count(msg.presenceCount ?? (msg.presence || []).length);
            break;
          case 'resume':
            me = msg.client;
            role = msg.role ?? null;
            this.count(msg.presenceCount ?? (msg.presence || []).length);
            break;
          case 'event': {
            const { text } = table.applyEvent(msg);
            if (msg.by && msg.by.client !== me) say(`${msg.by.name} ${text}`);
            break;
          }
          case 'authorized': role = msg.role ?? role; break;
          case 'rows': table.applyRows(msg); break;
          case 'busy': table.setBusy(msg.section, msg.busy); break;
          case 'presence': if (typeof msg.count === 'number') this.count(msg.count); break;
          case 'view':
            // Presses still on their way were sent after asking for this view: they stay.
            table.applyView(msg.mode === 'private' ? 'private' : 'shared', msg.collapsed);
            break;
          case 'viewChanged':
            table.applyView('private', msg.collapsed);
            settle(entry);
            break;
          case 'ack': case 'error': settle(entry); break;
        }
        schedule();
      },
    });
    this.conn.connect();
  }

  /** A name for members who did not give one, kept for this run (others see it in presence). */
  get guest() {
    this.guestName ??= `guest-${Math.random().toString(36).slice(2, 6)}`;
    return this.guestName;
  }

  count(n) {
    this.host.people.textContent = n === 1 ? '1 here' : `${n} here`;
  }

  /** setTimeout that stop() cancels. */
  later(fn, ms) {
    this.timers ??= new Set();
    const t = setTimeout(() => { this.timers.delete(t); fn(); }, ms);
    this.timers.add(t);
  }

  /** Polite announcements, coalesced so a burst of remote changes is one message. */
  announcer(region) {
    let said = [];
    return (text) => {
      said.push(text);
      if (said.length > 1) return;
      this.later(() => {
        const more = said.length - 1;
        region.textContent = more === 0 ? said[0] : `${said.at(-1)} (and ${more} more ${more === 1 ? 'change' : 'changes'})`;
        said = [];
      }, 700);
    };
  }

  stop() {
    this.stopped = true;
    this.conn.close();
    this.cancelDraw();
    for (const t of this.timers ?? []) clearTimeout(t);
  }
}

if (!customElements.get('fold-table')) customElements.define('fold-table', FoldTable);
