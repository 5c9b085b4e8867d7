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
      (s.colors || []).some((c) => c.toLowerCase().includes(q)) ||
      Object.keys(s.clusters || {}).some((c) => s.clusters[c] > 0 && c.toLowerCase().includes(q));
  }

  // clusterNames are the names of the console's clusters, sorted; empty
  // for a console over one cluster.
  function clusterNames() {
    return byName(state.clusters).map((c) => c.name);
  }

  // clustersText is a service's instances per cluster, "eu:2, us:0":
  // every cluster of the console, by name.
  function clustersText(s, names) {
    const counts = s.clusters || {};
    const all = [...new Set(names.concat(Object.keys(counts)))].sort();
    return all.map((c) => c + ':' + (counts[c] || 0)).join(', ');
  }

  // clusterStateText is what a cluster's health cell says.
  function clusterStateText(c) {
    switch (c.state) {
      case 'stale': return staleSinceText(c.staleSince);
      case 'fresh': case 'unreachable': case 'loading': return c.state;
      default: return String(c.state || '');
    }
  }

  // renderClusters shows the health of each cluster of a console over
  // several; the table is hidden for one cluster.
  function renderClusters() {
    const table = document.getElementById('cluster-health');
    const clusters = Array.isArray(state.clusters) ? byName(state.clusters) : null;
    table.hidden = !clusters;
    filter.placeholder = clusters ? 'filter by name, zone, region, version, color or cluster' : 'filter by name, zone, region, version or color';
    const rows = (clusters || []).map((c) => {
      const tr = el('tr');
      tr.dataset.cluster = c.name;
      tr.dataset.state = c.state || '';
      tr.appendChild(el('td', c.name, 'name'));
      tr.appendChild(el('td', c.region || '', 'region'));
      const st = el('td', clusterStateText(c), 'state');
      st.dataset.state = c.state || '';
      if (c.staleSince) st.title = c.staleSince;
      tr.appendChild(st);
      tr.appendChild(el('td', c.error || '', 'error'));
      tr.appendChild(el('td', c.services, 'services'));
      return tr;
    });
    table.querySelector('tbody').replaceChildren(...rows);
  }

  function render() {
    const tbody = document.querySelector('#services tbody');
    const rows = [];
    const now = Date.now();
    // A Sources column when the console merges legacy sources.
    const sources = state.services.some((s) => s.sources);
    document.querySelectorAll('#services .sources-col').forEach((e) => { e.hidden = !sources; });
    // A Clusters column when the console reads several etcd clusters.
    const clusters = Array.isArray(state.clusters);
    const names = clusterNames();
    document.querySelectorAll('#services .clusters-col').forEach((e) => { e.hidden = !clusters; });
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
      if (clusters) tr.appendChild(el('td', clustersText(s, names), 'clusters'));
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
    renderClusters();
    render();
  });
})();
