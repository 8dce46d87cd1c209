// The "Share..." dialog for a session's owners (servers with tokens): mint an invite link for a
// role, an expiry and a label over the HTTP API (POST /api/v1/sessions/N/invites), copy it, and
// list the live invites with a Withdraw button each (DELETE .../invites/ID, which also closes
// whoever joined with it). A native <dialog> opened with showModal(): the browser gives it the
// dialog role, keeps focus inside, closes it on Escape and gives focus back to the opener.

import { token } from './protocol.js';

const $ = (id) => document.getElementById(id);

/** Wires the dialog for session `name`; `shown(role)` tells it the member's role as it changes. */
export function setupShare(name) {
  const opener = $('share-open');
  const dialog = $('share-dialog');
  const base = `/api/v1/sessions/${encodeURIComponent(name)}/invites`;
  const status = $('share-status');

  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${token}` };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (!response.ok) throw new Error(data?.error?.message ?? `the server answered ${response.status}`);
    return data;
  }

  function when(seconds) {
    return new Date(seconds * 1000).toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' });
  }

  async function refresh() {
    const list = $('share-invites');
    try {
      const { invites } = await api('GET', base);
      list.replaceChildren(...invites.map((invite) => {
        const li = document.createElement('li');
        const text = document.createElement('span');
        const label = invite.label || 'No label';
        text.textContent = `${label} · ${invite.role} · until ${when(invite.expires)}`;
        const withdraw = document.createElement('button');
        withdraw.type = 'button';
        withdraw.textContent = 'Withdraw';
        withdraw.setAttribute('aria-label', `Withdraw ${label} (${invite.role})`);
        withdraw.addEventListener('click', async () => {
          try {
            await api('DELETE', `${base}/${encodeURIComponent(invite.id)}`);
            status.textContent = `Withdrew ${label}: its link no longer opens the session.`;
            await refresh();
            $('share-role').focus();
          } catch (e) { status.textContent = `Could not withdraw: ${e.message}`; }
        });
        li.append(text, ' ', withdraw);
        return li;
      }));
      $('share-none').hidden = invites.length > 0;
    } catch (e) {
      status.textContent = `Could not list the invites: ${e.message}`;
    }
  }

  opener.addEventListener('click', () => {
    status.textContent = '';
    $('share-result').hidden = true;
    dialog.showModal();
    $('share-role').focus();
    refresh();
  });
  $('share-close').addEventListener('click', () => dialog.close());
  $('share-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { role: $('share-role').value, expiresIn: Number($('share-expiry').value), label: $('share-label').value.trim() };
    try {
      const invite = await api('POST', base, body);
      // The address as this page reached the server (the answer's is as the server saw the Host).
      $('share-url').value = location.origin + invite.path;
      $('share-result').hidden = false;
      $('share-url').select();
      status.textContent = `Link made for a ${invite.role}, valid until ${when(invite.expires)}.`;
      await refresh();
    } catch (err) {
      status.textContent = `Could not make a link: ${err.message}`;
    }
  });
  $('share-copy').addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText($('share-url').value);
      status.textContent = 'Link copied.';
    } catch {
      $('share-url').select();
      status.textContent = 'Press Ctrl+C to copy the selected link.';
    }
  });

  return {
    /** Only owners on a server with tokens may share: the button is hidden otherwise. */
    shown(role) {
      opener.hidden = !(token && role === 'owner');
      if (opener.hidden && dialog.open) dialog.close();
    },
  };
}
