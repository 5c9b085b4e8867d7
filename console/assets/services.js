'use strict';

(function () {
  const params = new URLSearchParams(location.search);
  if (params.has('name') || params.get('page') === 'xds') return;
  document.getElementById('services-view').hidden = false;
  document.title = 'Muster console · services';
  let state = { services: [] };
  const filter = document.getElementById('filter');

  function matches(s, q) {
    if (!q) return true;
    q = q.toLowerCase();
    return s.name.toLowerCase().includes(q) ||
      (s.zones || []).some((z) => z.toLowerCase().includes(q)) ||
      (s.regions || []).some((r) => r.toLowerCase().includes(q)) ||
      (s.versions || []).some((v) => v.toLowerCase().includes(q)) ||
      (s.colors || []).some((c) => c.toLowerCase().includes(q));
  }

  function render() {
    const tbody = document.querySelector('#services tbody');
    const rows = [];
    const now = Date.now();
    // A Sources column when the console merges legacy sources.
    const sources = state.services.some((s) => s.sources);
    document.querySelectorAll('#services .sources-col').forEach((e) => { e.hidden = !sources; });
    for (const s of state.services) {
      if (!matches(s, filter.value.trim())) continue;
      const tr = document.createElement('tr');
      tr.dataset.service = s.name;
      const name = el('td');
      const a = el('a', s.name);
      a.href = '?name=' + encodeURIComponent(s.name);
      name.appendChild(a);
      tr.appendChild(name);
      tr.appendChild(el('td', s.loaded ? s.instances : '…', 'count'));
      if (sources) tr.appendChild(el('td', (s.sources || []).join(', '), 'sources'));
      tr.appendChild(el('td', s.draining, 'draining'));
      tr.appendChild(el('td', (s.zones || []).join(', ')));
      tr.appendChild(el('td', (s.regions || []).join(', '), 'regions'));
      tr.appendChild(el('td', (s.versions || []).join(', ')));
      tr.appendChild(el('td', (s.colors || []).join(', '), 'colors'));
      tr.appendChild(s.stale ? el('td', 'stale', 'stale') : el('td', 'live', 'muted'));
      const lc = el('td', s.lastChange ? formatAge(now - Date.parse(s.lastChange)) + ' ago' : '');
      if (s.lastChange) lc.title = s.lastChange;
      tr.appendChild(lc);
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
    document.getElementById('no-services').hidden = state.services.length > 0;
  }

  filter.addEventListener('input', render);
  setInterval(render, 5000);
  initSession(() => {}).catch(() => {});
  follow('api/services/events', (st) => {
    state = st;
    staleBanner(st);
    render();
  });
})();
