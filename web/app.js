// Page wiring: the lobby at /, a session at /s/<name>. Connection in protocol.js, table state in
// model.js, drawing in table.js.
import { Connection, closeSentence, takeTokenFromAddress } from './protocol.js';
import { Table } from './model.js';
import { TableView } from './table.js';
import { Activity } from './activity.js';
import { setupShare } from './share.js';

// Before anything else: the address loses its ?token= at once (protocol.js says why).
const token = takeTokenFromAddress();
// Whether the token is a link many people open ("shared": true in its claims, as invites are).
const sharedLink = (() => {
  try { return JSON.parse(atob(token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/'))).shared === true; } catch { return false; }
})();
const $ = (id) => document.getElementById(id);
const SESSION_RE = /^[A-Za-z0-9_-]{1,64}$/;
const NAME_KEY = 'foldtable.name';

// ---- display name: remembered per browser, editable at any time ----
let myName = localStorage.getItem(NAME_KEY);
if (!myName) {
  myName = `guest-${Math.random().toString(36).slice(2, 6)}`;
  localStorage.setItem(NAME_KEY, myName);
}
const nameInput = $('name');
nameInput.value = myName;
let onRename = () => {};
nameInput.addEventListener('change', () => {
  const n = nameInput.value.trim();
  if (!n || new TextEncoder().encode(n).length > 64) { nameInput.value = myName; return; }
  myName = n;
  localStorage.setItem(NAME_KEY, n);
  onRename();
});

// ---- connection banner ----
// The banner is a status region: its words change only when the situation does; the countdown
// ticks in an aria-hidden part so screen readers are not told every second.
let bannerTick = 0;
function showStatus(st, everOpen) {
  const banner = $('banner');
  clearInterval(bannerTick);
  if (st.state === 'open' || (st.state === 'connecting' && !everOpen)) {
    banner.hidden = true;
    return;
  }
  banner.hidden = false;
  banner.classList.toggle('fatal', st.state === 'fatal');
  const queued = st.queued ? ` ${st.queued} change${st.queued === 1 ? '' : 's'} will be sent when back.` : '';
  const fatal = {
    4501: 'This session was deleted.',
    4502: 'This server needs a valid token for this session: open the link you were given (…?token=…).',
    session_not_found: 'No session has this name (or you may not create one). Go back to the list of sessions to open or create one.',
    4503: 'An owner withdrew the link you joined with: ask them for a new one.',
    4504: 'An owner disconnected you from this session. Reload the page to join again.',
  };
  // A withdrawn token is refused from now on: a reload must not offer it again.
  if (st.state === 'fatal' && st.code === 4503) {
    try { sessionStorage.removeItem('foldtable-token'); } catch { /* storage disabled */ }
  }
  const text = st.state === 'fatal'
    ? (fatal[st.code] ?? `Disconnected by the server: ${closeSentence(st.code)} (code ${st.code}). Reload the page to try again.`)
    : `Connection lost. Reconnecting…${queued}`;
  if (banner.dataset.text !== text) {
    banner.dataset.text = text;
    const countdown = document.createElement('span');
    countdown.className = 'countdown';
    countdown.setAttribute('aria-hidden', 'true');
    const retry = document.createElement('button');
    retry.type = 'button';
    retry.textContent = 'Retry now';
    retry.addEventListener('click', () => conn.retryNow());
    banner.replaceChildren(text, countdown, retry);
  }
  const [countdown, retry] = banner.querySelectorAll('.countdown, button');
  retry.hidden = st.state !== 'down';
  const tick = () => {
    const secs = st.state === 'down' ? Math.ceil((st.retryAt - Date.now()) / 1000) : 0;
    countdown.textContent = secs > 0 ? `next try in ${secs} s` : '';
  };
  tick();
  if (st.state === 'down') bannerTick = setInterval(tick, 1000);
}

// ---- polite announcements, coalesced so a burst of remote edits is one message ----
let said = [];
let sayTimer = 0;
function say(text) {
  said.push(text);
  if (sayTimer) return;
  sayTimer = setTimeout(() => {
    const more = said.length - 1;
    $('live').textContent = more === 0 ? said[0] : `${said.at(-1)} (and ${more} more ${more === 1 ? 'change' : 'changes'})`;
    said = [];
    sayTimer = 0;
  }, 700);
}

// ---- a toast: what just happened, with one action (undo), for a few seconds ----
let toastTimer = 0;
function toast(text, action, act) {
  const t = $('toast');
  clearTimeout(toastTimer);
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = action;
  b.addEventListener('click', () => { t.hidden = true; act(); });
  t.replaceChildren(`${text} · `, b);
  t.hidden = false;
  // Long enough to reach the button with the keyboard; hovering or focusing keeps it.
  const hide = () => { toastTimer = setTimeout(() => { if (!t.matches(':hover, :focus-within')) t.hidden = true; else hide(); }, 8000); };
  hide();
}

function note(text) {
  const n = $('note');
  n.textContent = text;
  clearTimeout(n.timer);
  n.timer = setTimeout(() => { n.textContent = ''; }, 5000);
}

let conn;
const route = location.pathname.match(/^\/s\/([^/]+)\/?$/);
const session = route && decodeURIComponent(route[1]);
if (session && SESSION_RE.test(session)) startSession(session); else startLobby(route && session);

/** `list`, with the token when there is one (a server with tokens lists what the token opens). */
function listMessage() {
  return token ? { type: 'list', token } : { type: 'list' };
}

// ---- lobby: the sessions that exist, and a form to join or create one ----
function startLobby(badName) {
  $('lobby').hidden = false;
  if (badName) note(`“${badName}” is not a session name: use letters, digits, - and _.`);
  let everOpen = false;
  // A refused `list` (a server with tokens, and none or a wrong one here) is final until the
  // person acts: asking again would only be refused again, and enough refusals in a row make
  // the server close the connection (4500).
  let refused = false;
  const ask = () => { if (!refused) conn.sendNow(listMessage()); };
  conn = new Connection({
    session: null,
    name: () => myName,
    onMessage(msg) {
      if (msg.type === 'error') {
        refused = true;
        refusedNote(msg);
        return;
      }
      if (msg.type !== 'sessions') return;
      const ul = $('sessions');
      ul.replaceChildren(...msg.sessions.map(({ name, members }) => {
        const li = document.createElement('li');
        const a = document.createElement('a');
        a.href = `/s/${encodeURIComponent(name)}`;
        a.textContent = name;
        li.append(a, ` ${members} here`);
        return li;
      }));
      $('no-sessions').hidden = msg.sessions.length > 0;
    },
    onStatus(st) {
      // Only when the connection (re)opens: the lobby joins nothing, so nothing else is news.
      if (st.state === 'open' && st.opened) { everOpen = true; ask(); }
      showStatus(st, everOpen);
    },
  });
  conn.connect();
  // `list` is not pushed: ask again now and then while the lobby is open.
  setInterval(ask, 4000);
  function refusedNote(msg) {
    const n = $('note');
    clearTimeout(n.timer);
    const again = document.createElement('button');
    again.type = 'button';
    again.textContent = 'Ask again';
    again.addEventListener('click', () => { refused = false; n.textContent = ''; ask(); });
    const why = msg.code === 'unauthorized'
      ? 'This server lists sessions only with a token: open the link you were given (…?token=…).'
      : `The server refused the list: ${msg.message || msg.code}.`;
    n.replaceChildren(why, ' ', again);
  }
  $('join-form').addEventListener('submit', (e) => {
    e.preventDefault();
    // A name typed here may be new: `?new` asks the session page to create it.
    location.assign(`/s/${encodeURIComponent($('session-name').value.trim())}?new`);
  });
}

// ---- a session ----
function startSession(name) {
  document.title = `${name} — Foldtable`;
  $('session').hidden = false;
  $('session-title').textContent = name;

  const table = new Table();
  const share = setupShare(name); // the owners' "Share..." dialog
  let me = null;
  let loaded = false;
  let everOpen = false;
  const people = new Map();   // client -> name
  let count = 0;
  // Sections we asked to collapse/expand and show that way until the server answers.
  const want = new Map();     // section key -> {collapsed, id}
  // Sections we asked to expand, with when: a spinner if rows take more than half a second.
  const waiting = new Map();  // section key -> ms
  let reveal = null;          // {section, row, until}: scroll there once its rows are drawn
  let follow = null;          // {section, until}: the last section we expanded, to scroll its first rows into view
  let role = null;            // with tokens on: 'viewer', 'editor' or 'owner'; null in open mode
  let flashes = [];
  let catchUp = null;         // {to, n} while replaying what we missed
  // The member's own view (open mode keeps it per browser and session; with tokens the server
  // keeps it per token).
  const viewKey = `foldtable.view.${name}`;
  const activity = new Activity($('activity-list'), $('activity-empty'), $('activity-more'));

  const ui = {
    editing: () => $('edit').checked,
    collapsedShown: (s) => (want.has(s.key) ? want.get(s.key).collapsed : s.collapsed),
    // A table that turned its busy indicator off gets no spinner at all: neither the server's
    // `busy` (it sends none) nor this page's own, for rows that are slow to arrive.
    showsBusy: () => table.options.showBusyIndicator !== false,
    spinning(s) {
      const t = waiting.get(s.key);
      if (t === undefined) return false;
      if (ui.collapsedShown(s) || (table.complete(s) && !want.has(s.key))) { waiting.delete(s.key); return false; }
      return ui.showsBusy() && performance.now() - t >= 500 && !table.complete(s);
    },
    rowPending(rowKey) {
      for (const { msg } of conn.outbox.values()) {
        if (msg.type === 'updateRow' && msg.row === rowKey && 'value' in msg.set) return true;
      }
      return false;
    },
    // Our moves the server has not answered yet, oldest first: the next Alt+Arrow goes on from them.
    pendingMoves() {
      return [...conn.outbox.values()].map((e) => e.msg).filter((m) => m.type === 'moveRow' || m.type === 'moveSection');
    },
    send(change) {
      // "Removed · Undo" undoes our latest change: once another one goes, that is no longer the removal.
      if (change.type !== 'undo') $('toast').hidden = true;
      try { return conn.send(change); } catch (e) { note(e.message); return null; }
    },
    privateView: () => table.mode === 'private',
    // Viewers (tokens on) change nothing: no edit controls at all. Open mode has no roles.
    mayEdit: () => role !== 'viewer',
    moved: (text) => say(text),
    // No confirm dialog: the section goes at once, and a toast offers to undo it.
    removeSection(s) {
      if (ui.send({ type: 'removeSection', section: s.key })) toast(`Removed ${s.title.split('\n')[0]}`, 'Undo', () => ui.send({ type: 'undo' }));
    },
    // `set` rather than `toggle`: a press queued while offline must mean "expanded", not "flip
    // whatever it is by the time we are back".
    toggle(key) {
      // A viewer folds only its own view: in the shared one the server would refuse it (and
      // enough refusals in a row close the connection), so say how instead.
      if (!ui.mayEdit() && table.mode !== 'private') {
        note('As a viewer you fold sections in your own view: switch on “My view”.');
        return;
      }
      const s = table.section(key);
      const collapsed = !ui.collapsedShown(s);
      const id = ui.send({ type: 'set', section: key, collapsed });
      expect(key, collapsed, id);
      // Expanding the last section: its rows open below the fold, so the page scrolls to show up
      // to five of them (as the original table view did), once they are drawn.
      if (id && !collapsed && table.sections.at(-1) === s) follow = { section: key, until: performance.now() + 15000 };
      else if (follow?.section === key) follow = null;
    },
  };
  const view = new TableView($('table'), ui);

  function expect(key, collapsed, id) {
    if (!id) return;
    want.set(key, { collapsed, id });
    if (collapsed) waiting.delete(key);
    else { waiting.set(key, performance.now()); setTimeout(schedule, 520); }
    schedule();
  }

  // Drawing is batched per frame; the timer also covers hidden windows, where frames stop.
  let raf = 0;
  let tid = 0;
  function schedule() {
    if (raf || tid) return;
    raf = requestAnimationFrame(draw);
    tid = setTimeout(draw, 100);
  }
  function draw() {
    cancelAnimationFrame(raf);
    clearTimeout(tid);
    raf = tid = 0;
    if (!loaded) return;
    view.render(table);
    for (const [key, who] of flashes) view.flash(key, who);
    flashes = [];
    const o = table.options;
    $('accordion').checked = !!o.accordion;
    $('accordion').disabled = !mayChangeOptions();
    // A viewer's page has no control that changes the table.
    for (const id of ['everyone', 'edit-switch']) $(id).hidden = !ui.mayEdit();
    // Expand and collapse all change a viewer's own view only.
    for (const id of ['expand-all', 'collapse-all']) $(id).hidden = !ui.mayEdit() && table.mode !== 'private';
    if (!ui.mayEdit() && $('edit').checked) { $('edit').checked = false; editMode(); }
    $('expand-all').disabled = !!o.accordion;
    drawOptions(o);
    const names = [...people.entries()].map(([c, n]) => (c === me ? `${n} (you)` : n));
    const more = count - Math.min(names.length, 20);
    $('people').textContent = `${count} here: ${names.slice(0, 20).join(', ')}${more > 0 ? ` and ${more} more` : ''}`;
    if (reveal) {
      if (performance.now() > reveal.until) reveal = null;
      else if (view.showRow(reveal.section, reveal.row)) reveal = null;
    }
    if (follow && (performance.now() > follow.until || reveal || view.showFirstRows(follow.section, 5))) follow = null;
    // Spinners appear, and reveals and follows may complete, with time rather than with a message.
    for (const key of waiting.keys()) if (!table.section(key)) waiting.delete(key);
    if (waiting.size || reveal || follow) setTimeout(schedule, follow ? 50 : 200);
  }

  function settle(entry) {
    const m = entry?.msg;
    if (!m) return;
    for (const [key, w] of want) if (w.id === m.id) want.delete(key);
    if (m.type === 'updateRow') view.touchRow(m.row);
  }

  // Opened from the lobby's form (`?new`): the name may be new, so the join asks to create it.
  // The address keeps no `?new`: a shared or bookmarked link only opens what exists.
  const create = new URLSearchParams(location.search).has('new');
  if (create) history.replaceState(history.state, '', location.pathname + location.hash);
  $('share').href = location.href;
  $('share').textContent = location.href;
  conn = new Connection({
    session: name,
    create,
    name: () => myName,
    // Resume replays events, and streams rows only for sections those events expanded: rows of
    // a section that was still streaming when we dropped would never complete. Start afresh.
    canResume: () => !table.sections.some((s) => s.pending),
    onStatus(st) {
      if (st.state === 'open') everOpen = true;
      showStatus(st, everOpen);
    },
    onMessage(msg, entry) {
      switch (msg.type) {
        case 'welcome':
          me = msg.client;
          role = msg.role ?? null;
          share.shown(role);
          table.load(msg.table);
          view.views.forEach((v) => { v.v = -1; });
          people.clear();
          for (const p of msg.presence || []) people.set(p.client, p.name);
          count = msg.presenceCount ?? people.size;
          if (loaded) say('Reconnected. The table was reloaded from the server.');
          loaded = true;
          // A welcome is the shared state: a private view is asked for (open mode) or sent by
          // the server (tokens) again.
          table.mode = 'shared';
          drawView();
          if (msg.view?.mode === 'private') showView(msg.view);
          else if (viewKeptHere() && savedView()) conn.sendNow({ type: 'view', mode: 'private', collapsed: savedView() });
          activity.clear();
          askHistory();
          break;
        case 'resume':
          // Events up to msg.seq are the ones we missed; they follow now.
          catchUp = { to: msg.seq, n: 0 };
          if (conn.seq >= msg.seq) { say('Reconnected. Nothing was missed.'); catchUp = null; }
          me = msg.client;
          role = msg.role ?? null;
          share.shown(role);
          // A resumed connection is a new one to the server: the private view goes with it.
          if (table.mode === 'private' && viewKeptHere() && savedView()) conn.sendNow({ type: 'view', mode: 'private', collapsed: savedView() });
          people.clear();
          for (const p of msg.presence || []) people.set(p.client, p.name);
          count = msg.presenceCount ?? people.size;
          break;
        case 'event': {
          const { sections, text } = table.applyEvent(msg);
          activity.add({ seq: msg.seq, time: msg.time ?? Date.now(), author: msg.by, text });
          const remote = msg.by && msg.by.client !== me;
          if (remote) for (const key of sections) flashes.push([key, msg.by.name]);
          if (catchUp && msg.seq <= catchUp.to) {
            catchUp.n++;
            if (msg.seq === catchUp.to) {
              say(`Reconnected. Caught up on ${catchUp.n} change${catchUp.n === 1 ? '' : 's'}.`);
              catchUp = null;
            }
          } else if (remote) {
            say(`${msg.by.name} ${text}`);
          }
          break;
        }
        case 'authorized': role = msg.role ?? role; share.shown(role); break;
        case 'rows': table.applyRows(msg); break;
        case 'busy': table.setBusy(msg.section, msg.busy); break;
        case 'presence': {
          // One diff per interval: who joined, was renamed or left since the last one. Past the
          // server's list threshold `joined` is only a sample and `count` is what is exact.
          const gone = new Set(msg.left || []);
          const came = (msg.joined || []).filter((p) => p.client !== me && !people.has(p.client) && !gone.has(p.client)).map((p) => p.name);
          const went = (msg.left || []).filter((c) => people.has(c)).map((c) => people.get(c));
          const renamed = (msg.renamed || []).filter((p) => p.client !== me && people.has(p.client) && people.get(p.client) !== p.name)
            .map((p) => `${people.get(p.client)} is now ${p.name}`);
          if (msg.members) people.clear();
          for (const p of [...(msg.members || []), ...(msg.renamed || []), ...(msg.joined || [])]) people.set(p.client, p.name);
          for (const c of msg.left || []) people.delete(c);
          if (!msg.complete) while (people.size > 200) people.delete(people.keys().next().value);
          count = msg.count ?? people.size;
          const who = (names) => (names.length <= 3 ? names.join(', ') : `${names.slice(0, 2).join(', ')} and ${names.length - 2} others`);
          if (came.length) say(`${who(came)} joined`);
          if (went.length) say(`${who(went)} left`);
          for (const text of renamed.slice(0, 3)) say(text);
          break;
        }
        case 'found': {
          if (msg.id !== findId) break;
          const known = new Set(hits.filter((h) => h.r).map((h) => h.r.key));
          for (const m of msg.rows || []) {
            const s = table.section(m.section);
            if (!s || known.has(m.row) || hits.length >= 30) continue;
            hits.push({ s, r: { key: m.row, label: m.label, value: m.value }, text: m.label, sub: `${s.title}${m.value ? ` · ${m.value}` : ''}` });
          }
          if (active < 0 && hits.length) active = 0;
          findId = null; // answered: nothing more is coming for this query
          drawHits();
          drawNone();
          break;
        }
        case 'ack': settle(entry); break;
        case 'view': showView(msg); break;
        case 'viewChanged':
          table.applyView('private', msg.collapsed);
          saveView();
          settle(entry);
          break;
        case 'history':
          if (msg.id !== historyId) break;
          historyId = null;
          for (const ev of msg.events || []) {
            activity.add({ seq: ev.seq, time: ev.time, author: ev.author, text: table.describe(ev) });
          }
          activity.more(!!msg.more);
          break;
        case 'error':
          settle(entry);
          if (msg.id && msg.id === historyId) { historyId = null; activity.unavailable(); break; }
          note(`Not done: ${undoRefusals[msg.code] ?? msg.message ?? msg.code}`);
          break;
      }
      schedule();
    },
  });
  // Joined: tell the session (everyone sees the rename); not joined: the next join carries it.
  onRename = () => { if (conn.ready) conn.sendNow({ type: 'rename', name: myName }); };
  conn.connect();

  // ---- my view: private or shared ----
  // The page keeps the private view in open mode and for a shared link (an invite many people
  // open: the server keeps views per person, and a link is no person); else the server does.
  function viewKeptHere() { return role === null || sharedLink; }
  function savedView() {
    try { const v = JSON.parse(localStorage.getItem(viewKey)); return v && typeof v === 'object' ? v : null; } catch { return null; }
  }
  function saveView() {
    if (!viewKeptHere()) return; // with a token of one's own the server keeps it
    if (table.mode !== 'private') { localStorage.removeItem(viewKey); return; }
    const map = {};
    for (const s of table.sections) map[s.key] = s.collapsed;
    localStorage.setItem(viewKey, JSON.stringify(map));
  }
  function showView(msg) {
    const mode = msg.mode === 'private' ? 'private' : 'shared';
    const was = table.mode;
    table.applyView(mode, msg.collapsed);
    // Toggles still on their way were meant for the view we left.
    want.clear();
    saveView();
    drawView();
    if (was !== mode) say(mode === 'private' ? 'Now in your own view: what you open or close, only you see.' : 'Back to the shared view.');
  }
  function drawView() {
    const mine = table.mode === 'private';
    $('my-view').checked = mine;
    document.body.classList.toggle('private', mine);
    $('back-shared').hidden = !mine;
    const state = $('view-state');
    const strong = document.createElement('strong');
    strong.textContent = mine ? 'My view' : 'Shared view';
    const more = document.createElement('span');
    more.className = 'why';
    more.textContent = mine
      ? ' · only you see what you open or close; others’ changes to the table still arrive'
      : ' · opening or closing a section does it for everyone';
    state.replaceChildren(strong, more);
  }
  function askView(mode) {
    if (mode === table.mode) return;
    const m = { type: 'view', mode };
    if (mode === 'private' && viewKeptHere() && savedView()) m.collapsed = savedView();
    conn.sendNow(m);
  }
  $('my-view').addEventListener('change', (e) => {
    e.target.checked = table.mode === 'private'; // shown once the server says so
    askView(table.mode === 'private' ? 'shared' : 'private');
  });
  $('back-shared').addEventListener('click', () => askView('shared'));

  // ---- undo and redo: Ctrl+Z, Ctrl+Shift+Z and Ctrl+Y, not while typing in a field ----
  const undoRefusals = {
    nothing_to_undo: 'nothing of yours to undo.',
    nothing_to_redo: 'nothing to redo.',
    undo_conflict: 'someone changed the same thing since, so it was left as it is.',
  };
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    // Typing in a field: its own undo. A checkbox or a button is not typing.
    if (t.matches?.('textarea, select, [contenteditable], input:not([type=checkbox], [type=radio], [type=button])')) return;
    if (e.altKey && e.shiftKey && e.code === 'KeyS' && table.mode === 'private') { e.preventDefault(); askView('shared'); return; }
    if (!(e.ctrlKey || e.metaKey) || e.altKey || !ui.mayEdit()) return;
    const key = e.key.toLowerCase();
    if (key === 'z') { e.preventDefault(); ui.send({ type: e.shiftKey ? 'redo' : 'undo' }); }
    else if (key === 'y' && !e.shiftKey) { e.preventDefault(); ui.send({ type: 'redo' }); }
  });

  // ---- activity: history on (re)join, then live from events ----
  let historyId = null;
  let historyCount = 0;
  function askHistory(before) {
    historyId = `hist-${++historyCount}`;
    conn.sendNow(before ? { type: 'history', before, limit: 50, id: historyId } : { type: 'history', limit: 50, id: historyId });
  }
  $('activity').addEventListener('toggle', () => activity.refresh());
  $('activity-more').addEventListener('click', () => { if (activity.oldest) askHistory(activity.oldest); });

  // ---- toolbar ----
  $('expand-all').addEventListener('click', () => ui.send({ type: 'setAll', collapsed: false }));
  $('collapse-all').addEventListener('click', () => ui.send({ type: 'setAll', collapsed: true }));
  $('accordion').addEventListener('change', (e) => ui.send({ type: 'setOptions', options: { accordion: e.target.checked } }));
  function editMode() {
    $('add-section').hidden = !ui.editing();
    document.body.classList.toggle('editing', ui.editing());
    schedule();
  }
  $('edit').addEventListener('change', editMode);

  // ---- table options ----
  // Only owners may change options (Protocol.md, "Access"); in open mode there are no roles and
  // everyone may. The panel shows for owners, and in open mode in edit mode, so that people who
  // only read the table are not handed its settings.
  function mayChangeOptions() { return role === null || role === 'owner'; }
  const optionFields = [...$('options').querySelectorAll('[data-opt]')];
  const bytes = (t) => new TextEncoder().encode(t).length;
  function drawOptions(o) {
    $('options').hidden = !(role === 'owner' || (role === null && ui.editing()));
    for (const f of optionFields) {
      if (f === document.activeElement && f.type !== 'checkbox') continue; // being typed in
      if (optionPending(f.dataset.opt)) continue; // ours, not yet applied: keep showing it
      const value = o[f.dataset.opt];
      if (f.type === 'checkbox') f.checked = f.dataset.opt === 'showBusyIndicator' ? value !== false : !!value;
      else f.value = value ?? '';
    }
  }
  function optionPending(name) {
    for (const { msg } of conn.outbox.values()) if (msg.type === 'setOptions' && name in msg.options) return true;
    return false;
  }
  $('options').addEventListener('submit', (e) => e.preventDefault());
  $('options').addEventListener('change', (e) => {
    const f = e.target;
    const name = f.dataset.opt;
    if (!name) return;
    let value;
    if (f.type === 'checkbox') value = f.checked;
    else if (f.type === 'number') {
      value = Number(f.value);
      if (f.value === '' || !Number.isInteger(value) || value < +f.min || value > +f.max) {
        note(`${f.labels[0].textContent} must be a whole number from ${f.min} to ${f.max}.`);
        value = undefined;
      }
    } else {
      value = f.value.trim();
      // The server refuses indicators that are empty or longer than 16 bytes (TableLimits).
      if (!value || bytes(value) > 16) {
        note(`${f.labels[0].textContent} must be 1 to 16 bytes of text.`);
        value = undefined;
      }
    }
    if (value !== undefined && value !== table.options[name]) {
      ui.send({ type: 'setOptions', options: { [name]: value } });
    } else if (f.type !== 'checkbox') {
      f.value = table.options[name] ?? ''; // refused here, or no change: show what the table has
    }
  });
  $('add-section').addEventListener('submit', (e) => {
    e.preventDefault();
    const title = $('new-section-title').value.trim();
    if (title && ui.send({ type: 'addSection', title })) $('new-section-title').value = '';
  });
  $('copy-link').addEventListener('click', async () => {
    try { await navigator.clipboard.writeText(location.href); note('Link copied.'); } catch { getSelection().selectAllChildren($('share')); }
  });

  // ---- find: over section titles and the rows this page has, then the server's answer for
  // rows of sections this page never loaded ----
  const find = $('find');
  const results = $('results');
  let hits = [];
  let active = -1;
  let findTimer = 0;
  let findCount = 0;
  let findId = null;
  find.addEventListener('input', () => {
    const q = find.value.trim().toLowerCase();
    clearTimeout(findTimer);
    findTimer = 0;
    findId = null;
    // Asked once typing pauses; the answer is shown only if it is for the latest query.
    if (q && table.sections.some((s) => s.rowCount > 0 && !table.complete(s))) {
      findTimer = setTimeout(() => {
        findTimer = 0;
        findId = `find-${++findCount}`;
        conn.sendNow({ type: 'find', q: find.value.trim(), limit: 30, id: findId });
      }, 150);
    }
    hits = [];
    if (q) {
      for (const s of table.sections) {
        if (hits.length >= 30) break;
        if (s.title.toLowerCase().includes(q)) hits.push({ s, text: s.title, sub: 'section' });
        for (const r of table.list(s)) {
          if (hits.length >= 30) break;
          if (r.label?.toLowerCase().includes(q) || r.value?.toLowerCase().includes(q)) {
            hits.push({ s, r, text: r.label, sub: `${s.title}${r.value ? ` · ${r.value}` : ''}` });
          }
        }
      }
    }
    active = hits.length ? 0 : -1;
    drawHits();
    drawNone();
  });
  // "No matches" once nothing here matches and the server, if asked, found nothing either.
  function drawNone() {
    const none = find.value.trim() && !hits.length && !findTimer && findId === null;
    $('find-none').textContent = none ? 'No matches' : '';
  }
  find.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      if (hits.length) active = (active + (e.key === 'ArrowDown' ? 1 : hits.length - 1)) % hits.length;
      drawHits();
    } else if (e.key === 'Enter' && active >= 0) {
      e.preventDefault();
      pick(hits[active]);
    } else if (e.key === 'Escape') {
      closeHits();
    }
  });
  // The list closes and the query still pending is dropped: a server answer that comes later
  // (or the timer that would ask) must not open the list again over what the user did.
  function closeHits() {
    hits = [];
    active = -1;
    findId = null;
    clearTimeout(findTimer);
    findTimer = 0;
    drawHits();
  }
  results.addEventListener('mousedown', (e) => e.preventDefault()); // keep focus in the field
  results.addEventListener('click', (e) => {
    const li = e.target.closest('li');
    if (li) pick(hits[+li.dataset.i]);
  });
  function drawHits() {
    results.replaceChildren(...hits.map((h, i) => {
      const li = document.createElement('li');
      li.id = `hit${i}`;
      li.dataset.i = i;
      li.setAttribute('role', 'option');
      li.setAttribute('aria-selected', String(i === active));
      const small = document.createElement('small');
      small.textContent = h.sub;
      li.append(h.text, ' ', small);
      return li;
    }));
    results.hidden = !hits.length;
    $('find-none').textContent = '';
    $('find-box').setAttribute('aria-expanded', String(hits.length > 0));
    if (active >= 0 && hits.length) find.setAttribute('aria-activedescendant', `hit${active}`);
    else find.removeAttribute('aria-activedescendant');
    results.querySelector('[aria-selected="true"]')?.scrollIntoView({ block: 'nearest' });
  }
  function pick(h) {
    closeHits();
    if (!h) return;
    if (ui.collapsedShown(h.s)) {
      // reveal: the server expands the row's section (for everyone), then sends its rows.
      if (h.r) expect(h.s.key, false, ui.send({ type: 'reveal', row: h.r.key }));
      else expect(h.s.key, false, ui.send({ type: 'set', section: h.s.key, collapsed: false }));
    }
    if (h.r) reveal = { section: h.s.key, row: h.r.key, until: performance.now() + 15000 };
    else view.focusSection(h.s.key);
    schedule();
  }
}
