// The client's copy of one session's table, kept in step with the server's messages.
// No DOM here: table.js draws it, app.js feeds it.

export class Table {
  constructor() {
    // 'shared': `collapsed` is the session's state. 'private' (the member's own view): `collapsed`
    // is what this member sees, and events' collapsed maps only move `shared`.
    this.mode = 'shared';
    this.options = {};
    this.sections = [];
    this.byKey = new Map();     // section key -> section
    this.rowHome = new Map();   // row key -> section holding it (rows we have seen)
  }

  /** Replace everything with a welcome snapshot. */
  load(table) {
    this.options = { ...table.options };
    this.byKey.clear();
    this.rowHome.clear();
    this.sections = (table.sections || []).map((s) => this.adopt(s));
  }

  adopt(src) {
    const s = {
      key: src.key, title: src.title ?? '', detail: src.detail, footer: src.footer,
      collapsed: !!src.collapsed, shared: !!src.collapsed, busy: !!src.busy,
      rowCount: src.rowCount ?? src.rows?.length ?? 0,
      // rows: complete and current; partial: arriving in `rows` chunks. Collapsed sections keep
      // complete rows they once had (events keep them current), so search can still find them.
      rows: null, partial: null, pending: false,
      collapseSeq: 0, fix: null, fresh: new Set(), v: 0,
    };
    if (Array.isArray(src.rows)) {
      s.rows = src.rows.slice();
      for (const r of s.rows) this.rowHome.set(r.key, s);
    } else if (!s.collapsed) {
      if (s.rowCount > 0) this.startStream(s); else s.rows = [];
    }
    this.byKey.set(s.key, s);
    return s;
  }

  startStream(s) {
    s.pending = true;
    s.partial = null;
    // Changes to rows made while a section streams in: a later chunk may still carry the
    // row's older state, so they are remembered and re-applied to incoming rows.
    s.fix = new Map();
  }

  section(key) { return this.byKey.get(key); }
  streaming() { return this.sections.filter((s) => s.fix); }
  list(s) { return s.rows ?? s.partial ?? []; }
  complete(s) { return !!s.rows && !s.pending; }

  /** A `rows` chunk. Returns the section if it changed. */
  applyRows(m) {
    const s = this.byKey.get(m.section);
    // Rows belong to the expansion with that seq; a later collapse makes them stale.
    if (!s || s.collapsed || m.seq < s.collapseSeq) return null;
    if (!s.fix) this.startStream(s);
    if (m.from === 0 || !s.partial) { s.partial = []; s.partialKeys = new Set(); }
    for (const row of m.rows || []) {
      if (s.partialKeys.has(row.key)) continue;
      const f = s.fix.get(row.key);
      if (f === null) continue;
      const r = f ? patch({ ...row }, f) : row;
      s.partial.push(r);
      s.partialKeys.add(r.key);
      this.rowHome.set(r.key, s);
    }
    if (typeof m.total === 'number') s.rowCount = Math.max(m.total, s.partial.length);
    if (m.final) {
      s.rows = s.partial;
      s.rowCount = s.rows.length;
      s.partial = s.partialKeys = s.fix = null;
      s.pending = false;
    }
    s.v++;
    return s;
  }

  setBusy(key, busy) {
    const s = this.byKey.get(key);
    if (s) { s.busy = !!busy; s.v++; }
    return s;
  }

  /**
   * Apply one `event`. Returns {sections: Set of touched keys, text: what happened, for people}.
   */
  applyEvent(ev) {
    const ch = ev.change || {};
    const touched = new Set();
    const text = this.describe(ev);
    const lists = (s) => [s.rows, s.partial].filter(Boolean);
    const touch = (s) => { if (s) { s.v++; touched.add(s.key); } return s; };

    switch (ch.type) {
      case 'undo': case 'redo':
        // The changes that take a change back (or make it again), in order; the event's
        // collapsed map follows below, as for the same changes sent alone.
        for (const inner of ch.changes || []) {
          for (const key of this.applyEvent({ ...ev, change: inner, collapsed: undefined }).sections) touched.add(key);
        }
        break;
      case 'addSection': {
        // The resolved change may carry the section as an object or flat; accept both.
        const src = ch.section && typeof ch.section === 'object' ? ch.section : ch;
        const key = src.key ?? ch.key;
        if (!key || this.byKey.has(key)) break;
        const collapsed = ev.collapsed?.[key] ?? src.collapsed ?? !!this.options.sectionsInitiallyCollapsed;
        const s = this.adopt({ ...src, key, collapsed, rows: src.rows ?? [], rowCount: src.rows?.length ?? 0 });
        this.sections.splice(clampIndex(ch.index ?? src.index, this.sections.length), 0, s);
        touch(s);
        break;
      }
      case 'removeSection': {
        const s = this.byKey.get(ch.section);
        if (!s) break;
        this.sections.splice(this.sections.indexOf(s), 1);
        this.byKey.delete(s.key);
        for (const l of lists(s)) for (const r of l) this.rowHome.delete(r.key);
        touched.add(s.key);
        break;
      }
      case 'updateSection': {
        const s = this.byKey.get(ch.section);
        if (!s) break;
        for (const k of ['title', 'detail', 'footer']) {
          if (ch.set && k in ch.set) s[k] = ch.set[k] ?? undefined;
        }
        touch(s);
        break;
      }
      case 'moveSection': {
        const s = this.byKey.get(ch.section);
        if (!s) break;
        this.sections.splice(this.sections.indexOf(s), 1);
        this.sections.splice(clampIndex(ch.index, this.sections.length), 0, s);
        touch(s);
        break;
      }
      case 'addRow': {
        const s = this.byKey.get(ch.section);
        if (!s) break;
        const row = ch.row ?? { key: ch.key, label: ch.label, value: ch.value ?? '', detail: ch.detail };
        this.putRow(s, row, ch.index);
        s.fresh.add(row.key);
        touch(s);
        break;
      }
      case 'moveRow': {
        const s = this.byKey.get(ch.section);
        // `from` says where the row was and what it held, also when we never loaded that section.
        let row = this.takeRow(ch.row, touch);
        if (!row && ev.from) {
          const old = this.byKey.get(ev.from.section);
          if (old) touch(old).rowCount = Math.max(0, old.rowCount - 1);
          row = ev.from.row;
        }
        if (!s) break;
        if (row) this.putRow(s, row, ch.index); else s.rowCount++;
        s.fresh.add(ch.row);
        touch(s);
        break;
      }
      case 'removeRow': {
        if (this.rowHome.has(ch.row)) this.takeRow(ch.row, touch);
        else if (ev.from && this.byKey.has(ev.from.section)) {
          const old = touch(this.byKey.get(ev.from.section));
          old.rowCount = Math.max(0, old.rowCount - 1);
        }
        for (const o of this.streaming()) o.fix.set(ch.row, null);
        break;
      }
      case 'updateRow': {
        const s = this.rowHome.get(ch.row);
        if (s) for (const l of lists(s)) { const r = l.find((x) => x.key === ch.row); if (r) patch(r, ch.set); }
        // Not arrived yet (or arrived already) in a section still streaming: fix it on arrival.
        for (const o of s ? [s] : this.streaming()) {
          if (o.fix) o.fix.set(ch.row, { ...(o.fix.get(ch.row) || {}), ...ch.set });
        }
        touch(s);
        break;
      }
      case 'setOptions':
        Object.assign(this.options, ch.options || {});
        break;
      case 'importRows': {
        // The event carries how many rows, not the rows: they follow in `rows` chunks at this
        // seq while the section is shown (earlier chunks are stale).
        const s = this.byKey.get(ch.section);
        if (!s) break;
        const replace = ch.replace !== false;
        if (replace) for (const l of lists(s)) for (const r of l) this.rowHome.delete(r.key);
        s.rowCount = (replace ? 0 : s.rowCount) + (ch.count ?? 0);
        s.collapseSeq = ev.seq;
        s.rows = s.partial = s.partialKeys = s.fix = null;
        s.pending = false;
        if (s.rowCount === 0) s.rows = [];
        else if (!s.collapsed) this.startStream(s);
        touch(s);
        break;
      }
    }

    // Every collapsed-state change the event caused, including accordion and reveal effects.
    for (const [key, collapsed] of Object.entries(ev.collapsed || {})) {
      const s = this.byKey.get(key);
      if (!s) continue;
      if (s.shared !== !!collapsed) { s.shared = !!collapsed; touch(s); }
      // In a private view the member's own state stays: the shared one shows as a marker.
      if (this.mode === 'private') continue;
      if (this.setCollapsed(s, !!collapsed, ev.seq)) touch(s);
    }
    return { sections: touched, text };
  }

  /**
   * Shows a section collapsed or expanded (for this member). `seq`, when known, is the event that
   * did it: rows of an earlier expansion are stale from then on. Returns whether it changed.
   */
  setCollapsed(s, collapsed, seq) {
    if (s.collapsed === collapsed) return false;
    s.collapsed = collapsed;
    if (collapsed) {
      if (seq !== undefined) s.collapseSeq = seq;
      s.partial = s.partialKeys = s.fix = null;
      s.pending = false;
      // Rows we had only in part are now stale; complete ones stay (events keep them current).
    } else if (s.rows && !s.pending) {
      // Rows we hold whole stay: events kept them current, and the server sends rows on an
      // expansion only to members that lack them.
    } else if (s.rowCount > 0) {
      // The server now streams this section's rows to us.
      this.startStream(s);
    } else {
      s.rows ??= [];
    }
    s.v++;
    return true;
  }

  /**
   * The member's view: 'private' with its collapsed map (the whole map, or only what changed),
   * or 'shared' (back to the session's state). Returns the keys that changed.
   */
  applyView(mode, collapsed) {
    this.mode = mode;
    const changed = [];
    for (const s of this.sections) {
      const want = mode === 'shared' ? s.shared : collapsed?.[s.key];
      if (want !== undefined && this.setCollapsed(s, !!want)) changed.push(s.key);
    }
    return changed;
  }

  /** Remove a row we know of; returns the row object, or null if we never had its text. */
  takeRow(key, touch) {
    const s = this.rowHome.get(key);
    if (!s) return null;
    let found = null;
    for (const l of [s.rows, s.partial]) {
      const i = l ? l.findIndex((x) => x.key === key) : -1;
      if (i >= 0) found = l.splice(i, 1)[0];
    }
    s.partialKeys?.delete(key);
    if (s.fix) s.fix.set(key, null);
    this.rowHome.delete(key);
    s.rowCount = Math.max(0, s.rowCount - 1);
    touch(s);
    return found;
  }

  putRow(s, row, index) {
    s.rowCount++;
    this.rowHome.set(row.key, s);
    if (s.fix) s.fix.delete(row.key);
    for (const l of [s.rows, s.partial]) {
      if (!l || l.some((x) => x.key === row.key)) continue;
      l.splice(clampIndex(index, l.length), 0, l === s.rows ? row : { ...row });
      if (l === s.partial) s.partialKeys.add(row.key);
    }
  }

  /** Words for the live region and the author badge, computed before the change is applied. */
  describe(ev) {
    const ch = ev.change || {};
    const t = (key) => this.byKey.get(key)?.title ?? key;
    const rowLabel = (key) => {
      const s = this.rowHome.get(key);
      return (s && this.list(s).find((r) => r.key === key)?.label) || 'a row';
    };
    const flips = Object.entries(ev.collapsed || {});
    const flipText = flips.map(([k, c]) => `${c ? 'collapsed' : 'expanded'} ${t(k)}`).join(', ');
    switch (ch.type) {
      case 'undo': case 'redo': {
        const inner = (ch.changes || []).map((c) => this.describe({ change: c })).join(', ');
        const did = ch.type === 'undo' ? 'undid a change' : 'redid a change';
        return inner || flipText ? `${did} (${[inner, flipText].filter(Boolean).join(', ')})` : did;
      }
      // A history entry has no collapsed map: a `set` says what it asked for.
      case 'set': if (!flips.length && ev.collapsed === undefined) return `${ch.collapsed ? 'collapsed' : 'expanded'} ${t(ch.section)}`;
      // falls through
      case 'toggle': case 'reveal':
        if (!flips.length && ev.collapsed === undefined) return ch.type === 'toggle' ? `toggled ${t(ch.section)}` : `revealed a row in ${t(ch.section ?? this.rowHome.get(ch.row)?.key)}`;
        return flipText || `left ${t(ch.section)} as it was`;
      case 'setAll': return `${ch.collapsed ? 'collapsed' : 'expanded'} all sections`;
      case 'addSection': return `added section ${(typeof ch.section === 'object' ? ch.section?.title : ch.title) ?? ''}`;
      case 'removeSection': return `removed section ${t(ch.section)}`;
      case 'updateSection': return ch.set && 'title' in ch.set ? `renamed ${t(ch.section)} to ${ch.set.title}` : `edited section ${t(ch.section)}`;
      case 'moveSection': return `moved section ${t(ch.section)}`;
      case 'addRow': return `added ${ch.row?.label ?? ch.label ?? 'a row'} to ${t(ch.section)}`;
      case 'removeRow': return `removed ${rowLabel(ch.row)}`;
      case 'updateRow': return ch.set && 'value' in ch.set ? `set ${rowLabel(ch.row)} to “${ch.set.value}”` : `renamed ${rowLabel(ch.row)}`;
      case 'moveRow': return `moved ${rowLabel(ch.row)}`;
      case 'importRows': return `imported ${ch.count} row${ch.count === 1 ? '' : 's'} into ${t(ch.section)}`;
      case 'setOptions': {
        const o = ch.options || {};
        const said = [];
        if ('accordion' in o) said.push(`turned accordion ${o.accordion ? 'on' : 'off'}`);
        if ('collapsedIndicator' in o || 'expandedIndicator' in o) said.push('changed the indicators');
        if ('sectionsInitiallyCollapsed' in o) said.push(`made new sections start ${o.sectionsInitiallyCollapsed ? 'collapsed' : 'expanded'}`);
        if ('showBusyIndicator' in o) said.push(`turned the busy indicator ${o.showBusyIndicator ? 'on' : 'off'}`);
        if ('busyThresholdMs' in o) said.push(`set the busy threshold to ${o.busyThresholdMs} ms`);
        if ('titleLines' in o) {
          said.push(o.titleLines > 0 ? `limited titles to ${o.titleLines} line${o.titleLines === 1 ? '' : 's'}` : 'showed whole titles');
        }
        return said.join(', ') || 'changed the table options';
      }
      default: return 'changed the table';
    }
  }
}

function patch(row, set) {
  for (const [k, v] of Object.entries(set || {})) {
    if (v === null) delete row[k]; else row[k] = v;
  }
  return row;
}

function clampIndex(i, len) {
  return typeof i === 'number' ? Math.max(0, Math.min(i, len)) : len;
}
