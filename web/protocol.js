// The WebSocket connection: reconnect with backoff, resume by seq/epoch, and an outbox of changes
// that survives drops. Knows the wire protocol (Protocol.md), not the table.
//
// A documented ES module: the page (app.js), the embeddable <fold-table> element (embed.js) and
// anyone's own script import it, so nothing here touches the page it is imported into until
// asked to (takeTokenFromAddress is the page's, and only the page calls it).

/**
 * The close codes of Protocol.md ("Closes"): whether reconnecting unchanged can help, and what
 * the close means. The same table as FoldtableCore's CloseCode; a unit test
 * (CloseCodeTableTests) fails while this copy, Protocol.md and the core disagree.
 * @type {Object<number, {retry: boolean, sentence: string}>}
 */
export const CLOSE_CODES = {
  1001: { retry: true, sentence: 'the server is shutting down' },
  1002: { retry: false, sentence: 'a WebSocket protocol violation (bad opcode, RSV bits, oversized control frame)' },
  1003: { retry: false, sentence: 'a binary message' },
  1007: { retry: false, sentence: 'invalid UTF-8' },
  1009: { retry: false, sentence: 'a message over the size limit' },
  4000: { retry: true, sentence: 'too slow: the outbound queue passed its cap, or a row stream was not taken within the stream timeout' },
  4001: { retry: true, sentence: 'no join within the join deadline' },
  4002: { retry: true, sentence: 'the token expired and no fresh one came within the grace period' },
  4500: { retry: false, sentence: 'too many refused messages in a row (malformed or refused changes alike)' },
  4501: { retry: false, sentence: 'the session was deleted' },
  4502: { retry: false, sentence: 'the join had no token, or one not valid for the session' },
  4503: { retry: false, sentence: 'an owner withdrew the token' },
  4504: { retry: false, sentence: 'an owner disconnected this member' },
};

/**
 * Whether reconnecting after a close with `code` can help: what the table says, and for codes it
 * does not list, yes except in 4500-4999 (CloseCode.retries in the core).
 * @param {number} code
 * @returns {boolean}
 */
export function closeRetries(code) {
  return CLOSE_CODES[code]?.retry ?? !(code >= 4500 && code <= 4999);
}

/**
 * The close in words (CloseCode.sentence in the core).
 * @param {number} code
 * @returns {string}
 */
export function closeSentence(code) {
  return CLOSE_CODES[code]?.sentence ?? `closed with code ${code}`;
}

/**
 * The page's token (from its address or, after that, the tab's storage), or null. A live
 * binding: null until the page calls {@link takeTokenFromAddress}; scripts that only embed a
 * table never set it.
 * @type {string|null}
 */
export let token = null;

/**
 * Takes a token given in the page's address (`?token=...`, or `#token=...` as invite links carry
 * it: a fragment is never sent, so no server or proxy log sees it) out of it at once, so it stays out of
 * the history, bookmarks, screenshots of the address bar and Referer headers; the tab keeps it
 * (sessionStorage) for reconnects, reloads and the lobby's links. Sets and returns
 * {@link token}. For the Foldtable page itself: a page that embeds a table keeps its address.
 * @returns {string|null}
 */
export function takeTokenFromAddress() {
  const url = new URL(location.href);
  const inFragment = new URLSearchParams(url.hash.slice(1)).get('token');
  const given = url.searchParams.get('token') ?? inFragment;
  if (given !== null) {
    url.searchParams.delete('token');
    if (inFragment !== null) url.hash = '';
    history.replaceState(history.state, '', url.pathname + url.search + url.hash);
  }
  try {
    if (given) sessionStorage.setItem('foldtable-token', given);
    token = given || sessionStorage.getItem('foldtable-token');
  } catch {
    token = given || null; // storage disabled: this page view only
  }
  return token;
}

/**
 * The WebSocket address of the Foldtable server at `base` (any URL on it: the server's root, a
 * session's page `https://tables.example.com/s/demo`, or this page's address by default):
 * `wss://tables.example.com/ws` (`ws:` for `http:`).
 * @param {string|URL} [base]
 * @returns {string}
 */
export function socketURL(base = location.href) {
  const u = new URL(base, location.href);
  return `${u.protocol === 'https:' ? 'wss:' : 'ws:'}//${u.host}/ws`;
}

const MAX_MESSAGE = 64 * 1024;

// A per-tab random prefix makes change ids unique within a session without coordination;
// the server treats a repeated id as "already applied", which makes resending after a drop safe.
const tabPrefix = Array.from(crypto.getRandomValues(new Uint8Array(4)), (b) => (b % 36).toString(36)).join('');
// The number in each change id, counted for the whole tab rather than per Connection: every
// Connection here joins with the same idScope, so two of them (two <fold-table>s on one session,
// an element restarted after its attributes changed, an element beside the site's own script)
// counting from 1 each would send the same ids, and the server would take the second change for
// a retry of the first (acknowledged, never applied) or refuse it (id_reused). A resend after a
// reconnect stays safe: it reuses the id stored in the outbox entry, not a new number.
let lastChangeNumber = 0;
// This tab's idScope, sent with every join: in open mode the server keeps our change ids apart
// from everyone else's under it, and a retry after a reconnect is still recognised as ours.
// Random and never shown to others, so nobody can use up or be answered for our ids.
const idScope = Array.from(crypto.getRandomValues(new Uint8Array(20)), (b) => (b % 36).toString(36)).join('');

/**
 * One member's connection to one session (or, with `session: null`, to the lobby, which only
 * lists sessions). Joins on every (re)connect, resumes from the last event seen (`since` and
 * `epoch`) when it can, reconnects with backoff after a close that retrying can help, and keeps
 * the changes sent with {@link Connection#send} in an outbox until the server answers each one,
 * resending them (same ids, so at most once) after a reconnect.
 *
 * What arrives: every server message (Protocol.md: `welcome`, `resume`, `event`, `rows`, `ack`,
 * `error`, `presence`, ...) goes to `onMessage`; the connection's state to `onStatus`.
 *
 * @example
 * import { Connection } from 'https://tables.example.com/protocol.js';
 * const conn = new Connection({
 *   url: 'wss://tables.example.com/ws', session: 'demo', token: '…', name: 'report bot',
 *   onMessage(msg) { if (msg.type === 'event') console.log(msg.seq, msg.by?.name, msg.change); },
 * });
 * conn.connect();
 * conn.send({ type: 'set', section: 'fruit', collapsed: false });
 */
export class Connection {
  /**
   * @param {object} o
   * @param {string|null} o.session  session to join, or null for the lobby (only `list`)
   * @param {string|(() => string)} o.name  display name, read at every (re)join
   * @param {(msg: object, entry?: {msg: object}) => void} o.onMessage  every message from the
   *   server; for an `ack` or `error` that answers a change of ours, `entry.msg` is that change
   * @param {(status: object) => void} [o.onStatus]  {state: 'connecting'|'open'|'down'|'fatal', queued, opened, retryAt, code}
   * @param {string} [o.url]  the WebSocket address (see {@link socketURL}); default: this page's server
   * @param {string|null} [o.token]  the token to join with; default: the page's {@link token}
   * @param {() => boolean} [o.canResume]  false: rejoin from a fresh snapshot instead of resuming
   * @param {boolean} [o.create]  make the session if it does not exist (the user opened a new name)
   */
  constructor({ session, name, onMessage, onStatus = () => {}, url, token: given, canResume = () => true, create = false }) {
    Object.assign(this, { session, name: typeof name === 'function' ? name : () => name, onMessage, onStatus, canResume, create });
    this.wsURL = url ?? socketURL();
    this.given = given;
    this.ws = null;
    this.ready = false;        // joined (welcome/resume seen) or, in the lobby, open
    this.seq = null;           // last event seq applied, for `since`
    this.epoch = null;
    this.outbox = new Map();   // id -> {msg, sent}; insertion order = send order
    this.attempt = 0;
    this.timer = null;
    this.closed = false;       // close() was called: nothing connects or sends again
    this.info = { state: 'connecting' };
    this.online = () => this.retryNow();
    // A socket may linger half-dead after the network went away; do not wait for it to time out.
    this.offline = () => this.drop();
    window.addEventListener('online', this.online);
    window.addEventListener('offline', this.offline);
  }

  /** The token this connection joins with: its own, else the page's (read at every join). */
  get token() {
    return this.given === undefined ? token : this.given;
  }

  /** The WebSocket address it connects to. */
  url() {
    return this.wsURL;
  }

  /**
   * Opens the socket and joins (again after a drop: resuming when it can). Reconnects by itself
   * afterwards; call it once. `quiet` skips the 'connecting' report. After {@link Connection#close}
   * it does nothing: a closed connection stays closed (make a new one instead).
   */
  connect(quiet = false) {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.timer = null;
    if (!quiet) this.status('connecting');
    const ws = (this.ws = new WebSocket(this.url()));
    ws.onopen = () => {
      if (this.session) {
        const join = { type: 'join', session: this.session, name: this.name(), idScope };
        if (this.token) join.token = this.token;
        if (this.create) join.create = true;
        if (this.seq !== null && this.epoch && this.canResume()) Object.assign(join, { since: this.seq, epoch: this.epoch });
        ws.send(JSON.stringify(join));
      } else {
        this.ready = true;
        this.attempt = 0;
        this.status('open');
      }
    };
    ws.onmessage = (e) => {
      // The server may batch several objects into one message, one per line.
      for (const line of String(e.data).split('\n')) {
        if (!line.trim()) continue;
        let msg;
        try { msg = JSON.parse(line); } catch { continue; }
        this.receive(msg);
      }
    };
    ws.onclose = (e) => { if (this.ws === ws) this.lost(e.code); };
  }

  /** The socket closed with `code`: reconnect after a backoff, or report `fatal` (internal). */
  lost(code) {
    this.ready = false;
    this.ws = null;
    // The lobby never joins, so the server closes it at the join deadline (4001): just reopen.
    if (!this.session && code === 4001) { this.info = { state: 'connecting' }; this.connect(true); return; }
    if (!closeRetries(code)) {
      this.status('fatal', { code });
      return;
    }
    // Exponential backoff with jitter, so a restarted server is not hit by everyone at once.
    const delay = Math.min(10000, 400 * 2 ** this.attempt++) * (0.75 + Math.random() / 4);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), delay);
    this.status('down', { retryAt: Date.now() + delay, code });
  }

  /** Drops the socket now (the network went away) and reconnects as after a close. */
  drop() {
    const ws = this.ws;
    if (!ws) return;
    ws.onclose = null;
    ws.close();
    this.lost(1006);
  }

  /** Stops for good: closes without reconnecting and reports `fatal` with `code`. */
  giveUp(code) {
    const ws = this.ws;
    this.ws = null;
    if (ws) { ws.onclose = null; ws.close(); }
    this.status('fatal', { code });
  }

  /**
   * Closes for good and quietly (no report, no reconnect): for a page part that goes away (an
   * embedded table taken out of its page). Changes still in the outbox are dropped unsent (or
   * unanswered: each may or may not have been applied). Final: afterwards
   * {@link Connection#connect}, {@link Connection#retryNow} and {@link Connection#sendNow} do
   * nothing and {@link Connection#send} throws; a new Connection starts over.
   */
  close() {
    this.closed = true;
    this.outbox.clear();
    clearTimeout(this.timer);
    this.timer = null;
    window.removeEventListener('online', this.online);
    window.removeEventListener('offline', this.offline);
    const ws = this.ws;
    this.ws = null;
    this.ready = false;
    if (ws) { ws.onclose = null; ws.onmessage = null; ws.close(1000); }
  }

  /** Reconnects now if waiting to (the backoff starts over). */
  retryNow() {
    if (this.timer) { this.attempt = 0; this.connect(); }
  }

  /** One message from the server: keeps seq, epoch and the outbox, then calls onMessage (internal). */
  receive(msg) {
    // For ack and error: the change they answer, so the app can settle what it showed early.
    const entry = msg.id != null ? this.outbox.get(msg.id) : undefined;
    switch (msg.type) {
      case 'welcome':
        // A welcome is a full snapshot, whether or not we asked to resume.
        this.seq = msg.seq;
        this.epoch = msg.epoch;
        this.joined();
        break;
      case 'resume':
        // Do not take msg.seq: the missed events follow, and each one advances this.seq.
        this.epoch = msg.epoch;
        this.joined();
        break;
      case 'event':
        if (typeof msg.seq === 'number') this.seq = msg.seq;
        break;
      case 'ack':
      case 'viewChanged': // a toggle in a private view: acknowledged, not broadcast
        this.outbox.delete(msg.id);
        break;
      case 'error':
        if (msg.id) this.outbox.delete(msg.id);
        // The join was refused for good (no such session): retrying the same join cannot help.
        if (!msg.id && !this.ready && this.session && msg.code === 'session_not_found') {
          this.giveUp(msg.code);
          return;
        }
        break;
    }
    this.onMessage(msg, entry);
    if (['welcome', 'resume', 'ack', 'viewChanged', 'error'].includes(msg.type)) this.status(this.ready ? 'open' : this.info.state);
  }

  /** Joined (welcome or resume): resends the outbox (internal). */
  joined() {
    this.ready = true;
    this.attempt = 0;
    // Everything not acknowledged goes (again) in the original order, with the original ids:
    // the server applies each id at most once.
    for (const entry of this.outbox.values()) this.transmit(entry);
  }

  /**
   * Queues a change (any change of Protocol.md: `set`, `toggle`, `addRow`, `updateRow`, `undo`,
   * ...) and returns its id. Sent now if joined, else after the next join; an `ack` (or `error`)
   * with that id answers it. Throws when the change is over the server's message size, or after
   * {@link Connection#close}.
   * @param {object} change
   * @returns {string}
   */
  send(change) {
    if (this.closed) throw new Error('connection closed');
    // Repeated edits of one field while offline: only the latest value matters, and an entry
    // never transmitted cannot have been applied, so it may be replaced.
    if (change.type === 'updateRow' || change.type === 'updateSection') {
      const target = change.row ?? change.section;
      for (const [id, e] of this.outbox) {
        const m = e.msg;
        if (!e.sent && m.type === change.type && (m.row ?? m.section) === target &&
            sameKeys(m.set, change.set)) {
          m.set = change.set;
          return id;
        }
      }
    }
    const id = `${tabPrefix}-${++lastChangeNumber}`;
    const entry = { msg: { ...change, id }, sent: false };
    if (JSON.stringify(entry.msg).length > MAX_MESSAGE) throw new Error('change too large');
    this.outbox.set(id, entry);
    if (this.ready) this.transmit(entry);
    this.status();
    return id;
  }

  /**
   * Sends a message outside the change log (`list`, `find`, `history`, `view`, `rename`) now, if
   * the socket is open; such messages are not queued (ask again after a reconnect).
   * @param {object} msg
   */
  sendNow(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  /** Puts one outbox entry on the socket if it is open (internal). */
  transmit(entry) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    this.ws.send(JSON.stringify(entry.msg));
    entry.sent = true;
  }

  /**
   * Reports {state, queued, opened, retryAt?, code?}; with no arguments, re-reports with a fresh
   * queue size. `opened` is true only on the report that enters 'open': the re-reports after every
   * ack and error are not a new connection, and must not make the lobby ask for its list again.
   */
  status(state, extra = {}) {
    const opened = state === 'open' && this.info.state !== 'open';
    if (state) this.info = { state, ...extra };
    this.onStatus({ ...this.info, queued: this.outbox.size, opened });
  }
}

function sameKeys(a, b) {
  const ka = Object.keys(a || {}), kb = Object.keys(b || {});
  return ka.length === kb.length && ka.every((k) => kb.includes(k));
}
