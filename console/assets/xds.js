'use strict';

// The xDS clients page (?page=xds). Node IDs, zones, versions and errors
// come from the clients: they are put in the page as text only.
(function () {
  if (new URLSearchParams(location.search).get('page') !== 'xds') return;
  document.getElementById('xds-view').hidden = false;
  document.title = 'Muster console · xDS clients';
  let state = { clients: [] };

  function versions(c) {
    const td = el('td', null, 'versions');
    for (const t of c.types) {
      const line = el('div', null, 'type');
      line.dataset.type = t.type;
      line.appendChild(el('span', t.type + ' ', 'muted'));
      line.appendChild(el('span', t.acked || '—', 'acked'));
      if (t.sent && t.sent !== t.acked) line.appendChild(el('span', ' (sent ' + t.sent + ', not acked)', 'pending'));
      if (t.ackedAt) line.title = 'acked at ' + t.ackedAt;
      td.appendChild(line);
    }
    return td;
  }

  function nacks(c) {
    const td = el('td', null, 'nack');
    for (const t of c.types) {
      if (!t.nack) continue;
      const line = el('div', t.type + ' ' + (t.nack.version || '?') + ': ' + t.nack.error, 'stale');
      line.title = 'at ' + t.nack.at;
      td.appendChild(line);
    }
    return td;
  }

  function render() {
    const now = Date.now();
    const rows = state.clients.map((c) => {
      const tr = el('tr');
      tr.dataset.node = c.node;
      tr.appendChild(el('td', c.node, 'node'));
      tr.appendChild(el('td', c.zone || '', 'zone'));
      tr.appendChild(el('td', c.region || '', 'region'));
      tr.appendChild(el('td', c.userAgent || '', 'user-agent'));
      tr.appendChild(el('td', (c.delta ? 'delta #' : 'ADS #') + c.stream));
      const since = el('td', formatAge(now - Date.parse(c.since)) + ' ago');
      since.title = c.since;
      tr.appendChild(since);
      tr.appendChild(el('td', (c.services || []).join(', ') + (c.moreServices ? ' and ' + c.moreServices + ' more' : ''), 'services'));
      tr.appendChild(versions(c));
      tr.appendChild(nacks(c));
      return tr;
    });
    if (state.more) {
      const tr = el('tr');
      const td = el('td', 'and ' + state.more + ' more clients not listed', 'muted');
      td.colSpan = 9;
      tr.appendChild(td);
      rows.push(tr);
    }
    document.querySelector('#xds-clients tbody').replaceChildren(...rows);
    document.getElementById('no-xds-clients').hidden = state.clients.length > 0;
  }

  setInterval(render, 5000);
  initSession(() => {}).catch(() => {});
  follow('api/xds/events', (st) => {
    state = st;
    setBanner('');
    render();
  });
})();
