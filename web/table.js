// Draws a Table (model.js) into the page and turns clicks and keys into intents for app.js (or,
// embedded, for embed.js: the root may sit in a shadow root, so focus and hit tests are asked of
// the root's own tree, never of `document`). DOM nodes are kept per section and per row key and
// patched, never rebuilt wholesale, so focus, caret and scroll positions survive remote changes.

const WINDOW_MIN = 150;   // sections with more rows render only the rows in view
const OVERSCAN = 8;
const reducedMotion = matchMedia('(prefers-reduced-motion: reduce)');
let ids = 0;

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};
const setText = (e, t) => { t = t ?? ''; if (e.textContent !== t) e.textContent = t; };
const setAttr = (e, a, v) => { if (e.getAttribute(a) !== v) e.setAttribute(a, v); };
const button = (act, text, label) => {
  const b = el('button', 'mini', text);
  b.type = 'button';
  b.dataset.act = act;
  b.dataset.label = b.title = label;
  b.setAttribute('aria-label', label);
  return b;
};
const input = (field, label, max = 1024, tag = 'input') => {
  const i = el(tag, `in-${field}`);
  i.dataset.field = field;
  i.maxLength = max;
  i.dataset.label = label;
  i.setAttribute('aria-label', label);
  return i;
};
// A field with its name shown above it (edit mode). The aria-label stays, naming the section too
// ("Title of section Fruit"); it starts with the visible words, so speech input finds it.
const labelled = (text, field) => {
  const l = el('label', 'fld');
  l.append(el('span', 'fld-name', text), field);
  return l;
};
// A grip to drag a section or row by (edit mode). Mouse and touch only: the keyboard moves the
// focused header or row with Alt+ArrowUp/Down instead, so the grip is hidden from assistive tech.
const grip = () => {
  const g = el('span', 'grip', '⠿');
  g.setAttribute('aria-hidden', 'true');
  return g;
};

export class TableView {
  /**
   * @param {HTMLElement} root
   * @param {object} ui  callbacks into app.js:
   *   toggle(key), send(change), editing(), collapsedShown(section), spinning(section), rowPending(rowKey),
   *   showsBusy()
   */
  constructor(root, ui) {
    this.root = root;
    this.ui = ui;
    this.views = new Map();  // section key -> view
    this.table = null;
    this.rowHeight = 0;
    this.turning = [];       // indicators that start turned in this render
    root.addEventListener('click', (e) => this.onClick(e));
    root.addEventListener('keydown', (e) => this.onKey(e));
    root.addEventListener('input', (e) => this.onInput(e));
    root.addEventListener('change', (e) => this.onChange(e));
    root.addEventListener('focusout', (e) => this.onFocusOut(e));
    root.addEventListener('pointerdown', (e) => this.onPointerDown(e));
    this.drag = null;
    this.refocus = null;     // {row, section, until}: focus the row once it is drawn in that section
  }

  /**
   * The focused element in the root's tree: the document's, or, inside a shadow root, the
   * shadow root's (from outside, `document.activeElement` is only the shadow's host).
   */
  active() {
    return this.root.getRootNode().activeElement;
  }

  render(table) {
    this.table = table;
    this.rowHeight ||= parseFloat(getComputedStyle(this.root).getPropertyValue('--row-h')) || 44;
    const focused = this.active();
    const editing = this.ui.editing();
    const alive = new Set();
    // Title lines: a CSS line clamp on every title (table-wide), so long titles end in "…"; the
    // whole title stays in the DOM for screen readers and in a tooltip.
    const lines = Math.max(0, Math.floor(table.options.titleLines || 0));
    this.root.classList.toggle('clamp', lines > 0);
    if (lines > 0) this.root.style.setProperty('--title-lines', lines);
    let ref = this.root.firstElementChild;
    for (const s of table.sections) {
      alive.add(s.key);
      let v = this.views.get(s.key);
      if (!v) { v = this.makeSection(s); this.views.set(s.key, v); }
      this.updateSection(v, s, editing);
      if (v.el !== ref) this.root.insertBefore(v.el, ref); else ref = ref.nextElementSibling;
    }
    for (const [key, v] of this.views) {
      if (!alive.has(key)) { v.el.remove(); this.views.delete(key); }
    }
    this.root.classList.toggle('empty', table.sections.length === 0);
    if (this.turning.length) {
      // Every indicator that changed starts from its turned state (one flush for all of them,
      // however many sections an expand-all changed), then transitions upright.
      void this.root.offsetWidth;
      for (const ind of this.turning) ind.classList.remove('turn-from-left', 'turn-from-right');
      this.turning = [];
    }
    // Moving a node out of order blurs it; give focus back.
    if (focused && focused !== this.active() && focused.isConnected) focused.focus({ preventScroll: true });
    // A row moved to another section is a new node there: focus follows it.
    if (this.refocus) {
      const { row, section, until } = this.refocus;
      const target = this.views.get(section)?.rowEls.get(row);
      if (performance.now() > until) this.refocus = null; // refused, or someone moved it on
      else if (target) {
        (target.querySelector('.value, .in-label') ?? target).focus({ preventScroll: false });
        this.refocus = null;
      }
    }
  }

  makeSection(s) {
    const n = ++ids;
    const v = { key: s.key, v: -1, editing: null, rowEls: new Map(), windowed: null };
    v.el = el('section', 'sec');
    v.el.dataset.sec = s.key;
    v.head = el('div', 'head');
    const h = el('h2', 'h');
    v.btn = el('button', 'toggle');
    v.btn.type = 'button';
    v.btn.id = `h${n}`;
    v.btn.setAttribute('aria-controls', `b${n}`);
    v.ind = el('span', 'ind');
    v.ind.setAttribute('aria-hidden', 'true');
    v.title = el('span', 'title');
    v.detail = el('span', 'detail');
    v.count = el('span', 'count');
    v.spin = el('span', 'spin');
    v.spin.setAttribute('aria-hidden', 'true');
    // In a private view: the shared state, when it differs from what this member sees.
    v.mark = el('span', 'shared-mark');
    v.btn.append(v.ind, v.title, v.detail, v.count, v.mark, el('span', 'spin-text', 'Loading rows…'), v.spin);
    h.append(v.btn);
    v.badges = el('span', 'badges');
    v.tools = el('div', 'tools');
    v.head.append(h, v.badges, v.tools);
    v.body = el('div', 'body');
    v.body.id = `b${n}`;
    v.inner = el('div', 'inner');
    v.rows = el('ul', 'rows');
    v.foot = el('p', 'foot');
    v.inner.append(v.rows, v.foot);
    v.body.append(v.inner);
    v.el.append(v.head, v.body);
    return v;
  }

  updateSection(v, s, editing) {
    const o = this.table.options;
    const mayEdit = this.ui.mayEdit();
    const collapsed = this.ui.collapsedShown(s);
    const spinning = this.ui.showsBusy() && (s.busy || this.ui.spinning(s));
    v.el.classList.toggle('collapsed', collapsed);
    v.el.classList.toggle('spinning', spinning);
    setAttr(v.el, 'aria-busy', String(spinning));
    setAttr(v.btn, 'aria-expanded', String(!collapsed));
    this.updateIndicator(v, collapsed, collapsed ? o.collapsedIndicator ?? '+' : o.expandedIndicator ?? '−');
    setText(v.title, s.title);
    if (o.titleLines > 0) setAttr(v.title, 'title', s.title); else v.title.removeAttribute('title');
    setText(v.detail, s.detail);
    setText(v.count, s.rowCount === 1 ? '1 row' : `${s.rowCount.toLocaleString('en')} rows`);
    // One count per header: a detail that already says how many ("4 models", "3/8") is the count.
    v.count.hidden = statesCount(s.detail, s.rowCount);
    setAttr(v.btn, 'aria-keyshortcuts', mayEdit ? 'Alt+ArrowUp Alt+ArrowDown' : '');
    if (!mayEdit) v.btn.removeAttribute('aria-keyshortcuts');
    setText(v.foot, s.footer);
    v.foot.hidden = !s.footer;
    setText(v.mark, this.table.mode === 'private' && s.shared !== collapsed ? (s.shared ? 'collapsed for everyone' : 'open for everyone') : '');

    if (v.editing !== editing) {
      v.tools.replaceChildren();
      if (editing) {
        // The title is a multi-line field: a title may have two lines ("Province" / "Sichuan").
        // Enter saves it; Shift+Enter starts a new line.
        const title = input('title', 'Title of section', 1024, 'textarea');
        title.rows = 1;
        title.setAttribute('aria-describedby', 'title-hint');
        const btns = el('span', 'btns');
        btns.append(button('up', '↑', 'Move section up'),
          button('down', '↓', 'Move section down'), button('addrow', '+ row', 'Add a row to section'),
          button('remove', '✕', 'Remove section'));
        v.tools.append(grip(), labelled('Title', title), labelled('Detail', input('detail', 'Detail of section')),
          labelled('Footer', input('footer', 'Footer of section')), btns);
      }
      v.tools.hidden = !editing;
    }
    if (editing) {
      for (const c of v.tools.querySelectorAll('[data-label]')) {
        // Name the section in every control's label ("Move section Fruit up").
        setAttr(c, 'aria-label', c.dataset.label.replace('section', `section ${s.title}`));
        const f = c.dataset.field;
        if (f && c !== this.active()) c.value = s[f] ?? '';
        if (f === 'title') c.rows = Math.min(4, c.value.split('\n').length);
      }
    }
    if (v.v !== s.v || v.editing !== editing || v.pendingRows) this.updateRows(v, s, editing);
    v.editing = editing;
    v.v = s.v;
  }

  /**
   * The indicator turns rather than swaps: on a change of state the new indicator is put in place
   * already turned a quarter (from -90° on expand, from +90° on collapse) and turns upright with a
   * CSS transform transition. At rest every indicator is upright, so any text stays readable: "+"
   * and "−" read as before (the "−" turns in from "|", so "+" seems to lose its upright stroke),
   * and a chevron pair such as "▸"/"▾" turns exactly like a disclosure triangle, since "▾" turned
   * -90° is "▸". Nothing turns on first draw, or when the person asked for reduced motion.
   */
  updateIndicator(v, collapsed, text) {
    const changed = v.collapsed !== undefined && v.collapsed !== collapsed;
    v.collapsed = collapsed;
    setText(v.ind, text);
    if (!changed || reducedMotion.matches) return;
    v.ind.classList.remove('turn-from-left', 'turn-from-right');
    v.ind.classList.add(collapsed ? 'turn-from-right' : 'turn-from-left');
    this.turning.push(v.ind); // render() lets them turn upright, all after one style flush
  }

  updateRows(v, s, editing) {
    const list = this.table.list(s);
    const windowed = list.length > WINDOW_MIN;
    if (windowed !== v.windowed || v.editing !== editing) {
      v.rows.replaceChildren();
      v.rowEls.clear();
      v.rows.classList.toggle('win', windowed);
      v.rows.onscroll = windowed ? () => this.scheduleWindow(v) : null;
      v.windowed = windowed;
    }
    v.pendingRows = false;
    v.list = list;
    if (windowed) {
      v.rows.style.setProperty('--n', list.length);
      this.renderWindow(v);
    } else {
      this.reconcileRows(v, list, list.map((r, i) => i), s.fresh);
    }
    s.fresh.clear();
  }

  scheduleWindow(v) {
    if (v.raf) return;
    v.raf = requestAnimationFrame(() => { v.raf = 0; this.renderWindow(v); });
  }

  // Only the rows inside the scrolled viewport (plus a few) exist in the DOM; each is placed at
  // its index times the fixed row height.
  renderWindow(v) {
    const h = this.rowHeight;
    const first = Math.max(0, Math.floor(v.rows.scrollTop / h) - OVERSCAN);
    const last = Math.min(v.list.length, Math.ceil((v.rows.scrollTop + (v.rows.clientHeight || 600)) / h) + OVERSCAN);
    const idx = [];
    for (let i = first; i < last; i++) idx.push(i);
    this.reconcileRows(v, v.list, idx, null);
  }

  reconcileRows(v, list, indexes, fresh) {
    const editing = this.ui.editing();
    const keep = new Set();
    let ref = v.rows.firstElementChild;
    const skipLeaving = () => { while (ref && ref.classList.contains('leave')) ref = ref.nextElementSibling; };
    skipLeaving();
    for (const i of indexes) {
      const row = list[i];
      if (!row) continue;
      keep.add(row.key);
      let r = v.rowEls.get(row.key);
      if (!r) {
        r = this.makeRow(row, editing);
        v.rowEls.set(row.key, r);
        if (fresh?.has(row.key) && !reducedMotion.matches) r.classList.add('enter');
      }
      this.updateRow(r, row, i, list.length, v.windowed);
      if (r !== ref) v.rows.insertBefore(r, ref); else { ref = ref.nextElementSibling; skipLeaving(); }
    }
    for (const [key, r] of v.rowEls) {
      if (keep.has(key)) continue;
      v.rowEls.delete(key);
      // Rows that left the window just go; rows that left the table slide out first.
      if (v.windowed || reducedMotion.matches || this.table.rowHome.has(key)) { r.remove(); continue; }
      if (r.contains(this.active())) v.btn.focus();
      r.classList.add('leave');
      setTimeout(() => r.remove(), 300);
    }
  }

  makeRow(row, editing) {
    const r = el('li', 'row');
    r.dataset.row = row.key;
    // Focusable from script only (find puts the focus on a row it reveals, also for viewers).
    r.tabIndex = -1;
    r.onanimationend = () => r.classList.remove('enter', 'hit'); // so a later move does not replay it
    const lab = el('div', 'lab');
    const label = editing ? input('label', 'Label of row') : el('span', 'label');
    label.id = `l${++ids}`;
    lab.append(label, el('span', 'rdetail'));
    // The value reads as text. An editor presses it (click, Enter or Space) to edit it in place;
    // a viewer gets plain text.
    let value;
    if (this.ui.mayEdit()) {
      value = el('button', 'value');
      value.type = 'button';
      value.dataset.act = 'edit';
      value.id = `v${ids}`;
      value.setAttribute('aria-labelledby', `${label.id} ${value.id}`);
      value.setAttribute('aria-keyshortcuts', 'Alt+ArrowUp Alt+ArrowDown');
      value.title = 'Edit';
    } else {
      value = el('span', 'value');
    }
    if (editing) r.append(grip());
    r.append(lab, value);
    if (editing) r.append(button('rup', '↑', 'Move row up'), button('rdown', '↓', 'Move row down'), button('rremove', '✕', 'Remove row'));
    return r;
  }

  /** Turns a row's value into a field in place, with the caret in it. */
  editValue(r, rowKey) {
    if (r.querySelector('.in-value')) return;
    const shown = r.querySelector('.value');
    const row = this.table.list(this.table.rowHome.get(rowKey) ?? {}).find((x) => x.key === rowKey);
    const f = input('value', row?.label || 'Value');
    f.value = shown.textContent;
    f.dataset.was = shown.textContent;
    shown.hidden = true;
    shown.after(f);
    f.focus();
    f.select();
  }

  /** Ends an in-place edit: sends what was typed (or, with `revert`, the value from before). */
  closeValue(f, rowKey, revert) {
    if (!f.isConnected || f.dataset.closing) return;
    f.dataset.closing = '1';
    if (revert) {
      // What was typed may have gone out already: then the old value goes back for everyone.
      f.value = f.dataset.was;
      f.dataset.typing = '1';
    }
    this.commitValue(f, rowKey);
    const shown = f.previousElementSibling;
    const refocus = f === this.active();
    if (shown?.classList.contains('value')) {
      setText(shown, f.value);
      shown.hidden = false;
    }
    f.remove();
    if (refocus && shown) shown.focus({ preventScroll: true });
  }

  updateRow(r, row, i, n, windowed) {
    const label = r.querySelector('.label');
    if (label) setText(label, row.label); else {
      const li = r.querySelector('.in-label');
      if (li !== this.active()) li.value = row.label ?? '';
    }
    const val = r.querySelector('.in-value');
    const shown = r.querySelector('.value');
    // An edit of ours not yet acknowledged wins over what the model says (it may be offline).
    const ours = this.ui.rowPending(row.key) || val?.dataset.typing;
    if (val && !ours) { if (val.value !== (row.value ?? '')) val.value = row.value ?? ''; }
    if (val) setAttr(val, 'aria-label', row.label || 'Value');
    if (!ours && !val) setText(shown, row.value);
    for (const c of r.querySelectorAll('button[data-label], .in-label')) setAttr(c, 'aria-label', c.dataset.label.replace('row', row.label || 'row'));
    setText(r.querySelector('.rdetail'), row.detail);
    if (windowed) {
      r.style.setProperty('--i', i);
      r.setAttribute('aria-posinset', i + 1);
      r.setAttribute('aria-setsize', n);
    }
  }

  // ---- intents ----

  target(e) {
    const sec = e.target.closest('[data-sec]');
    const row = e.target.closest('[data-row]');
    return { s: sec && this.table.section(sec.dataset.sec), rowKey: row?.dataset.row };
  }

  onClick(e) {
    const b = e.target.closest('button');
    if (!b) return;
    const { s, rowKey } = this.target(e);
    if (!s) return;
    const idx = this.table.sections.indexOf(s);
    const list = this.table.list(s);
    const ri = rowKey ? list.findIndex((r) => r.key === rowKey) : -1;
    const send = this.ui.send;
    switch (b.classList.contains('toggle') ? 'toggle' : b.dataset.act) {
      case 'toggle': return this.ui.toggle(s.key);
      case 'edit': return this.editValue(b.closest('[data-row]'), rowKey);
      case 'up': return idx > 0 && send({ type: 'moveSection', section: s.key, index: idx - 1 });
      case 'down': return idx < this.table.sections.length - 1 && send({ type: 'moveSection', section: s.key, index: idx + 1 });
      case 'remove': return this.ui.removeSection(s);
      case 'addrow': return send({ type: 'addRow', section: s.key, label: 'New row', value: '' });
      case 'rup': return ri > 0 && send({ type: 'moveRow', row: rowKey, section: s.key, index: ri - 1 });
      case 'rdown': return ri >= 0 && ri < list.length - 1 && send({ type: 'moveRow', row: rowKey, section: s.key, index: ri + 1 });
      case 'rremove': return send({ type: 'removeRow', row: rowKey });
    }
  }

  // Arrow keys walk the headers; Enter and Space are the button's own. Alt+ArrowUp/Down moves the
  // focused header's section, or the focused row (past the first or last row: into the section
  // before or after).
  onKey(e) {
    const t = e.target;
    if (t.classList.contains('in-value')) {
      if (e.key === 'Enter') { e.preventDefault(); this.closeValue(t, this.target(e).rowKey, false); }
      else if (e.key === 'Escape') { e.preventDefault(); this.closeValue(t, this.target(e).rowKey, true); }
      return;
    }
    if (t.classList.contains('in-title') && e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      t.dispatchEvent(new Event('change', { bubbles: true }));
      return;
    }
    if (e.altKey && (e.key === 'ArrowUp' || e.key === 'ArrowDown') && this.ui.mayEdit() && !t.matches('input, textarea')) {
      const up = e.key === 'ArrowUp';
      const { s, rowKey } = this.target(e);
      if (!s) return;
      e.preventDefault();
      if (rowKey) this.moveRowBy(s, rowKey, up);
      else if (t.classList.contains('toggle')) this.moveSectionBy(s, up);
      return;
    }
    if (!t.classList.contains('toggle')) return;
    const all = [...this.root.querySelectorAll('.toggle')];
    const i = all.indexOf(e.target);
    const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: all.length - 1 }[e.key];
    if (to === undefined || !all[to]) return;
    e.preventDefault();
    all[to].focus();
  }

  /**
   * The order as this member's own moves still waiting for the server will leave it: section
   * keys, and the row keys of each section (`rows(key)`). Alt+Arrow pressed again before the
   * server has answered the last press (quick hands, a slow link) moves on from where that press
   * put the row, as the person expects, not from where the page still shows it.
   */
  plannedOrder() {
    const order = this.table.sections.map((s) => s.key);
    const lists = new Map();
    const rows = (key) => {
      if (!lists.has(key)) {
        const s = this.table.section(key);
        lists.set(key, s ? this.table.list(s).map((r) => r.key) : []);
      }
      return lists.get(key);
    };
    const clamp = (i, n) => Math.max(0, Math.min(Number.isInteger(i) ? i : n, n));
    for (const m of this.ui.pendingMoves?.() ?? []) {
      if (m.type === 'moveSection') {
        const i = order.indexOf(m.section);
        if (i < 0) continue;
        order.splice(i, 1);
        order.splice(clamp(m.index, order.length), 0, m.section);
      } else if (m.type === 'moveRow' && order.includes(m.section)) {
        const from = order.find((key) => rows(key).includes(m.row));
        if (from !== undefined) rows(from).splice(rows(from).indexOf(m.row), 1);
        const to = rows(m.section);
        to.splice(clamp(m.index, to.length), 0, m.row);
      }
    }
    return { order, rows };
  }

  moveSectionBy(s, up) {
    const { order } = this.plannedOrder();
    const to = order.indexOf(s.key) + (up ? -1 : 1);
    if (to < 0 || to >= order.length) return;
    if (this.ui.send({ type: 'moveSection', section: s.key, index: to })) this.ui.moved(`Moved section ${s.title} to position ${to + 1}`);
  }

  moveRowBy(s, rowKey, up) {
    const label = this.table.list(s).find((r) => r.key === rowKey)?.label || 'row';
    const { order, rows } = this.plannedOrder();
    // The row's section by the plan: the one the page shows it in unless a move of ours took it on.
    const at = rows(s.key).includes(rowKey) ? s.key : order.find((key) => rows(key).includes(rowKey));
    if (at === undefined) return;
    const list = rows(at);
    const i = list.indexOf(rowKey);
    let change;
    let where;
    if (up ? i > 0 : i < list.length - 1) {
      change = { type: 'moveRow', row: rowKey, section: at, index: i + (up ? -1 : 1) };
      where = `to position ${change.index + 1}`;
    } else {
      // Past the edge: the last row of the section before, or the first of the one after.
      const other = this.table.section(order[order.indexOf(at) + (up ? -1 : 1)]);
      if (!other) return;
      // Its end: the rows it will hold, also those not loaded yet (a section still streaming).
      const end = this.table.complete(other) ? rows(other.key).length : Math.max(other.rowCount, rows(other.key).length);
      change = { type: 'moveRow', row: rowKey, section: other.key, index: up ? end : 0 };
      where = `to ${other.title}`;
    }
    if (this.ui.send(change)) {
      if (change.section !== s.key) this.refocus = { row: rowKey, section: change.section, until: performance.now() + 5000 };
      this.ui.moved(`Moved ${label} ${where}`);
    }
  }

  // ---- dragging (edit mode, by the grip): pointer events, so mouse, pen and touch alike ----

  onPointerDown(e) {
    const g = e.target.closest('.grip');
    if (!g || e.button !== 0 || !this.ui.mayEdit()) return;
    e.preventDefault();
    const rowEl = g.closest('[data-row]');
    const secEl = g.closest('[data-sec]');
    this.drag = rowEl
      ? { kind: 'row', key: rowEl.dataset.row, el: rowEl, to: null }
      : { kind: 'section', key: secEl.dataset.sec, el: secEl, to: null };
    this.drag.el.classList.add('dragging');
    g.setPointerCapture(e.pointerId);
    g.onpointermove = (ev) => this.dragMove(ev);
    g.onpointerup = (ev) => this.dragEnd(ev, true);
    g.onpointercancel = (ev) => this.dragEnd(ev, false);
  }

  /** Where a drop at (x, y) would put the dragged thing `d`: {section, index, mark, after}. */
  dropTarget(d, x, y) {
    const under = this.root.getRootNode().elementFromPoint(x, y);
    if (d.kind === 'section') {
      const secs = [...this.root.querySelectorAll(':scope > .sec')];
      let index = secs.findIndex((el) => { const r = el.getBoundingClientRect(); return y < r.top + r.height / 2; });
      if (index < 0) index = secs.length;
      const from = secs.indexOf(d.el);
      const mark = secs[index] ?? secs.at(-1);
      return { index: index > from ? index - 1 : index, mark, after: !secs[index] };
    }
    const secEl = under?.closest('.sec');
    if (!secEl || !this.root.contains(secEl)) return null;
    const s = this.table.section(secEl.dataset.sec);
    if (!s) return null;
    const rows = [...secEl.querySelectorAll('li.row:not(.leave)')];
    // On a header or a collapsed section: to the end of it.
    if (under.closest('.head') || this.ui.collapsedShown(s) || !rows.length) {
      const here = rows.includes(d.el);
      return { section: s.key, index: Math.max(0, s.rowCount - (here ? 1 : 0)), mark: secEl.querySelector('.head'), after: true };
    }
    let index = rows.findIndex((el) => { const r = el.getBoundingClientRect(); return y < r.top + r.height / 2; });
    if (index < 0) index = rows.length;
    const from = rows.indexOf(d.el);
    const mark = rows[index] ?? rows.at(-1);
    return { section: s.key, index: from >= 0 && index > from ? index - 1 : index, mark, after: !rows[index] };
  }

  dragMove(ev) {
    const d = this.drag;
    if (!d) return;
    const t = this.dropTarget(d, ev.clientX, ev.clientY);
    this.root.querySelectorAll('.drop-before, .drop-after').forEach((m) => m.classList.remove('drop-before', 'drop-after'));
    d.to = t;
    if (t?.mark) t.mark.classList.add(t.after ? 'drop-after' : 'drop-before');
  }

  dragEnd(ev, drop) {
    const d = this.drag;
    if (!d) return;
    this.drag = null;
    const g = ev.target;
    g.onpointermove = g.onpointerup = g.onpointercancel = null;
    d.el.classList.remove('dragging');
    this.root.querySelectorAll('.drop-before, .drop-after').forEach((m) => m.classList.remove('drop-before', 'drop-after'));
    const t = drop ? this.dropTarget(d, ev.clientX, ev.clientY) : null;
    if (!t) return;
    if (d.kind === 'section') {
      const s = this.table.section(d.key);
      if (s && this.table.sections.indexOf(s) !== t.index) this.ui.send({ type: 'moveSection', section: d.key, index: t.index });
      return;
    }
    const home = this.table.rowHome.get(d.key);
    const at = home ? this.table.list(home).findIndex((r) => r.key === d.key) : -1;
    if (home?.key === t.section && at === t.index) return;
    this.ui.send({ type: 'moveRow', row: d.key, section: t.section, index: t.index });
  }

  // Values go out while the person types (debounced), so others watch them change.
  onInput(e) {
    const i = e.target;
    if (i.dataset.field !== 'value') return;
    const { rowKey } = this.target(e);
    i.dataset.typing = '1';
    clearTimeout(i.timer);
    i.timer = setTimeout(() => this.commitValue(i, rowKey), 250);
  }

  commitValue(i, rowKey) {
    clearTimeout(i.timer);
    if (!i.dataset.typing) return;
    delete i.dataset.typing;
    // Nothing new (typed and taken back, or an Escape before anything went out): no change,
    // which would also be a change for Ctrl+Z to take back.
    if (i.value === (i.dataset.sentValue ?? i.dataset.was)) return;
    // Until the send, `typing` keeps the model from overwriting the field; after it, the
    // pending change in the outbox does.
    this.ui.send({ type: 'updateRow', row: rowKey, set: { value: i.value } });
    i.dataset.sentValue = i.value;
  }

  // Leaving an in-place value field ends the edit.
  onFocusOut(e) {
    const f = e.target;
    if (!f.classList?.contains('in-value')) return;
    const { rowKey } = this.target(e);
    // After the focus has moved: a click on the field's own row must not reopen it at once.
    setTimeout(() => this.closeValue(f, rowKey, false), 0);
  }

  onChange(e) {
    const i = e.target;
    const { s, rowKey } = this.target(e);
    if (!s) return;
    const f = i.dataset.field;
    if (f === 'value') return this.commitValue(i, rowKey);
    if (f === 'label' && i.value) return this.ui.send({ type: 'updateRow', row: rowKey, set: { label: i.value } });
    if (f === 'title' && i.value) return this.ui.send({ type: 'updateSection', section: s.key, set: { title: i.value } });
    if (f === 'detail' || f === 'footer') this.ui.send({ type: 'updateSection', section: s.key, set: { [f]: i.value || null } });
  }

  // ---- effects ----

  /** Briefly mark a section with who changed it. */
  flash(key, name) {
    const v = this.views.get(key);
    if (!v) return;
    // One badge per person: a second change restarts theirs rather than adding another.
    for (const old of v.badges.children) if (old.textContent === name) { clearTimeout(old.timer); old.remove(); }
    const b = el('span', 'badge', name);
    v.badges.append(b);
    b.timer = setTimeout(() => b.remove(), 2500);
  }

  /** Mark rows for re-render (e.g. our edit was acknowledged, so the model may show again). */
  touchRow(rowKey) {
    const s = this.table?.rowHome.get(rowKey);
    const v = s && this.views.get(s.key);
    if (v) v.pendingRows = true;
  }

  focusSection(key) {
    const v = this.views.get(key);
    if (!v) return;
    v.btn.scrollIntoView({ block: 'center', behavior: reducedMotion.matches ? 'auto' : 'smooth' });
    v.btn.focus({ preventScroll: true });
  }

  /**
   * Scrolls the page so that up to `n` rows of an expanded section come into view, without
   * scrolling its header out of view (the original table view did this for its last section).
   * Returns false while that cannot be done yet: rows not here, or the body still opening (the
   * page is not yet long enough to scroll to them).
   */
  showFirstRows(key, n) {
    const v = this.views.get(key);
    const s = this.table?.section(key);
    if (!v || !s || this.ui.collapsedShown(s)) return true; // gone or collapsed again: nothing to do
    const want = Math.min(n, s.rowCount);
    if (want === 0) return true;
    const list = v.list ?? [];
    const r = list.length >= want && v.rowEls.get(list[want - 1].key);
    if (!r) return false;
    if (v.body.getBoundingClientRect().height + 1 < v.inner.scrollHeight) return false;
    const viewport = document.documentElement.clientHeight;
    const overflow = r.getBoundingClientRect().bottom - viewport;
    if (overflow <= 0) return true;
    const by = Math.min(Math.ceil(overflow) + 8, Math.floor(v.head.getBoundingClientRect().top));
    if (by > 0) window.scrollBy({ top: by, behavior: reducedMotion.matches ? 'auto' : 'smooth' });
    return true;
  }

  /** Scroll a loaded row into view and put the caret in its value. Returns false if not drawn yet. */
  showRow(key, rowKey) {
    const v = this.views.get(key);
    const s = this.table.section(key);
    if (!v || !s || this.ui.collapsedShown(s)) return false;
    if (v.windowed) {
      const i = v.list.findIndex((r) => r.key === rowKey);
      if (i < 0) return false;
      v.rows.scrollTop = Math.max(0, i * this.rowHeight - v.rows.clientHeight / 2);
      this.renderWindow(v);
    }
    const r = v.rowEls.get(rowKey);
    if (!r) return false;
    r.scrollIntoView({ block: 'center' });
    r.classList.remove('hit');
    void r.offsetWidth; // restart the highlight animation
    r.classList.add('hit');
    const field = r.querySelector('.in-value, button.value') ?? r;
    field.focus({ preventScroll: true });
    return this.active() === field; // not yet focusable (still hidden): try again later
  }
}

/** Whether a header's detail already states the row count ("4 models", "3/8", "1,200 items"). */
function statesCount(detail, n) {
  if (!detail) return false;
  return (detail.replace(/(\d),(?=\d{3})/g, '$1').match(/\d+/g) || []).some((d) => Number(d) === n);
}
