// The Activity panel: who changed what, and when. Filled from `history` (the server's log) on
// every (re)join, then from live events; newest first, one entry per seq, times relative
// ("2 min ago") and refreshed.

const MAX_ENTRIES = 500;      // older entries go: the panel is for what happened lately
const REFRESH_MS = 30000;     // relative times move on in minutes; twice a minute is enough

/** "just now", "5 min ago", "3 h ago", "2 days ago", then the date. */
export function relativeTime(ms, now = Date.now()) {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 45) return 'just now';
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.round(m / 60);
  if (h < 24) return `${h} h ago`;
  const d = Math.round(h / 24);
  if (d < 7) return `${d} day${d === 1 ? '' : 's'} ago`;
  return new Date(ms).toLocaleDateString();
}

export class Activity {
  constructor(list, empty, moreButton) {
    Object.assign(this, { list, empty, moreButton });
    this.items = new Map();   // seq -> li
    this.oldest = null;       // the smallest seq shown: `before` for the next older page
    setInterval(() => this.refresh(), REFRESH_MS);
  }

  clear() {
    this.items.clear();
    this.oldest = null;
    this.list.replaceChildren();
    this.empty.textContent = 'Nothing yet.';
    this.empty.hidden = false;
    this.moreButton.hidden = true;
  }

  /** One event: {seq, time (ms since the epoch), author: {name}, text}. Kept in seq order. */
  add({ seq, time, author, text }) {
    if (typeof seq !== 'number' || this.items.has(seq)) return;
    const li = document.createElement('li');
    li.dataset.seq = seq;
    const when = document.createElement('time');
    const ms = typeof time === 'number' ? time : Date.now();
    when.dateTime = new Date(ms).toISOString();
    when.dataset.ms = ms;
    when.title = new Date(ms).toLocaleString();
    when.textContent = relativeTime(ms);
    li.append(`${author?.name ?? 'Someone'} ${text} · `, when);
    // Newest first: before the first entry with a smaller seq.
    let next = null;
    for (const [s, el] of this.items) if (s < seq && (!next || s > +next.dataset.seq)) next = el;
    this.list.insertBefore(li, next);
    this.items.set(seq, li);
    if (this.oldest === null || seq < this.oldest) this.oldest = seq;
    while (this.items.size > MAX_ENTRIES) {
      const last = this.list.lastElementChild;
      this.items.delete(+last.dataset.seq);
      last.remove();
      this.oldest = +this.list.lastElementChild.dataset.seq;
    }
    this.empty.hidden = true;
  }

  /** Whether the server has older entries than these. */
  more(yes) { this.moreButton.hidden = !yes; }

  /** This server keeps no history: only what happens from now on is shown. */
  unavailable() {
    if (!this.items.size) this.empty.textContent = 'Changes made from now on show here.';
  }

  refresh() {
    for (const t of this.list.querySelectorAll('time')) {
      const text = relativeTime(+t.dataset.ms);
      if (t.textContent !== text) t.textContent = text;
    }
  }
}
