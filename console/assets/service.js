'use strict';

(function () {
  const params = new URLSearchParams(location.search);
  if (!params.has('name')) return;
  const name = params.get('name');
  document.getElementById('service-view').hidden = false;
  document.getElementById('name').textContent = name;
  document.title = 'Muster console · ' + name;
  let state = { instances: [] };
  const timeline = [];
  const maxTimeline = 50;
  // pageSize bounds the rows in the table: a browser renders 10,000 rows
  // in seconds, 500 at once.
  const pageSize = 500;
  let page = 0;
  const fZone = document.getElementById('f-zone');
  const fRegion = document.getElementById('f-region');
  const fVersion = document.getElementById('f-version');
  const fColor = document.getElementById('f-color');
  const fSource = document.getElementById('f-source');
  const fCluster = document.getElementById('f-cluster');
  const policyCluster = document.getElementById('policy-cluster');
  const fMeta = document.getElementById('f-meta');
  // baseColor is the color filter's value for instances without a color.
  const baseColor = '-';

  // multi is true on a console over several etcd clusters: its state
  // lists them, and each instance names its cluster.
  function multi() {
    return Array.isArray(state.clusters);
  }

  // clusterNames are the names of the console's clusters, sorted; empty
  // for a console over one cluster.
  function clusterNames() {
    return byName(state.clusters).map((c) => c.name);
  }

  // leaseKey is an instance's key in a leases event: its cluster and ID
  // over several clusters (IDs hold no "/"), its ID otherwise.
  function leaseKey(cluster, id) {
    return cluster !== undefined && cluster !== null ? cluster + '/' + id : id;
  }

  // metaFilter parses "k=v k2=v2" into pairs; every pair must match.
  function metaFilter() {
    return fMeta.value.trim().split(/\s+/).filter((p) => p).map((p) => {
      const i = p.indexOf('=');
      return i < 0 ? [p, null] : [p.slice(0, i), p.slice(i + 1)];
    });
  }

  function matching() {
    const zone = fZone.value, region = fRegion.value, version = fVersion.value, color = fColor.value, source = fSource.value, meta = metaFilter();
    const cluster = multi() ? fCluster.value : '';
    return state.instances.filter((inst) => {
      if (cluster && inst.cluster !== cluster) return false;
      if (zone && inst.zone !== zone) return false;
      if (region && inst.region !== region) return false;
      if (source && inst.source !== source) return false;
      if (version && inst.version !== version) return false;
      if (color && (inst.color || baseColor) !== color) return false;
      const md = inst.metadata || {};
      return meta.every(([k, v]) => Object.prototype.hasOwnProperty.call(md, k) && (v === null || md[k] === v));
    });
  }

  function fillSelect(sel, values) {
    const keep = sel.value;
    const opts = [el('option', 'any')];
    opts[0].value = '';
    for (const v of values) {
      const o = el('option', v);
      o.value = v;
      opts.push(o);
    }
    sel.replaceChildren(...opts);
    sel.value = values.includes(keep) ? keep : '';
    if (keep && !values.includes(keep)) {
      // Keep a chosen value that no instance has any more.
      const o = el('option', keep);
      o.value = keep;
      sel.appendChild(o);
      sel.value = keep;
    }
  }

  function distinct(field) {
    return [...new Set(state.instances.map((i) => i[field]).filter((v) => v))].sort();
  }

  function ageCell(iso, now) {
    const td = el('td', iso ? formatAge(now - Date.parse(iso)) : '', 'age');
    if (iso) { td.title = iso; td.dataset.at = iso; }
    return td;
  }

  // fromMuster: actions apply to instances of Muster's registry, not to
  // those a legacy source lists.
  function fromMuster(inst) {
    return !inst.source || inst.source === 'muster';
  }

  function actionCell(inst) {
    const td = el('td', null, 'admin-only actions');
    if (!fromMuster(inst)) {
      td.textContent = 'in ' + inst.source + "'s registry";
      td.className += ' muted';
      return td;
    }
    if (inst.draining) {
      const b = el('button', 'Undrain', 'undrain');
      b.addEventListener('click', () => run('undrain', [inst]));
      td.appendChild(b);
    } else {
      const b = el('button', 'Drain', 'drain');
      b.addEventListener('click', () => run('drain', [inst]));
      td.appendChild(b);
    }
    const w = el('input', null, 'weight-input');
    w.type = 'number'; w.min = '0'; w.max = '10000'; w.placeholder = 'weight';
    const set = el('button', 'Set', 'set-weight');
    set.addEventListener('click', () => run('weight', [inst], w.value));
    td.append(w, set);
    return td;
  }

  function render() {
    const admin = muster.session.loggedIn;
    document.querySelectorAll('.admin-only').forEach((e) => { e.hidden = !admin; });
    document.getElementById('batch').hidden = !admin;
    fillSelect(fZone, distinct('zone'));
    fillSelect(fRegion, distinct('region'));
    fillSelect(fVersion, distinct('version'));
    fillSelect(fColor, [baseColor].concat(distinct('color')));
    fColor.querySelector('option[value="' + baseColor + '"]').textContent = 'base (no color)';
    // A Source column and filter when the console merges legacy sources.
    const sources = distinct('source');
    document.querySelectorAll('#service-view .source-col').forEach((e) => { e.hidden = sources.length === 0; });
    fillSelect(fSource, sources);
    // A Cluster column and filter, a table of the clusters and a choice of
    // the cluster whose policy to edit, when the console reads several.
    const clusters = multi();
    const names = clusterNames();
    document.querySelectorAll('#service-view .cluster-col').forEach((e) => { e.hidden = !clusters; });
    // No Lease column when the registry holds its instances by no leases
    // (ZooKeeper's sessions).
    document.querySelectorAll('#service-view .lease-col').forEach((e) => { e.hidden = !!state.noLeases; });
    fillSelect(fCluster, names);
    fillPolicyCluster(names);
    renderClusters();
    renderCanary();
    renderPolicy();
    const shown = matching();
    const pages = Math.max(1, Math.ceil(shown.length / pageSize));
    page = Math.min(page, pages - 1);
    const first = page * pageSize;
    const pageRows = shown.slice(first, first + pageSize);
    const pager = document.getElementById('pager');
    pager.hidden = pages === 1;
    document.getElementById('page-text').textContent =
      'rows ' + (first + 1) + '–' + (first + pageRows.length) + ' of ' + shown.length;
    document.getElementById('page-prev').disabled = page === 0;
    document.getElementById('page-next').disabled = page === pages - 1;
    const now = Date.now();
    const seen = new Map();
    const rows = pageRows.map((inst) => {
      // A row whose instance and layout did not change is kept as it is,
      // so an update elsewhere in the list leaves a weight being typed,
      // the focus and a pending click alone.
      // The lease time is left out of the key: tick shows it from the
      // cell's data, refreshed here and when new lease times arrive.
      // Two sources, or two clusters, may list instances of one ID: a row
      // is the instance's within its cluster and source.
      const id = JSON.stringify([inst.cluster || '', inst.source || '', inst.id]);
      const key = JSON.stringify([admin, sources.length > 0, clusters, { ...inst, leaseExpires: undefined }]);
      const old = rowCache.get(id);
      if (old && old.key === key) {
        const ttl = old.tr.querySelector('td.ttl');
        if (inst.leaseExpires) ttl.dataset.until = inst.leaseExpires;
        else if (ttl.dataset.until) { delete ttl.dataset.until; ttl.textContent = ''; }
        seen.set(id, old);
        return old.tr;
      }
      const tr = buildRow(inst, admin, sources, clusters, now);
      seen.set(id, { key, tr });
      return tr;
    });
    rowCache = seen;
    placeRows(document.querySelector('#instances tbody'), rows);
    tick();
    // "No instances." only for a list the registry gave: never while
    // nothing is loaded (an unknown state), and marked when it is the last
    // known one.
    const none = document.getElementById('no-instances');
    none.hidden = !(state.loaded && state.instances.length === 0) && !(state.stale && !state.loaded);
    none.dataset.state = !state.loaded ? 'unknown' : (state.stale ? 'stale' : 'fresh');
    none.textContent = !state.loaded
      ? 'Registry unreachable' + (state.staleSince ? ' since ' + new Date(state.staleSince).toLocaleTimeString() : '') +
        ' — nothing loaded yet: the instances are unknown.'
      : (state.stale ? 'No instances when the registry last answered (stale).' : 'No instances.');
    const drained = state.instances.filter((i) => i.draining).length;
    document.getElementById('summary').textContent = state.loaded
      // Over several clusters the revision is a sum that names nothing:
      // each cluster has its own.
      ? state.instances.length + ' instances, ' + drained + ' draining' +
        (state.clusters ? ' in ' + state.clusters.length + ' clusters' : ', revision ' + state.revision) +
        (state.stale ? ' (stale)' : '')
      : (state.stale ? 'not loaded: registry unreachable' : 'loading…');
    document.getElementById('matching').textContent = shown.length + ' of ' + state.instances.length + ' match';
    document.getElementById('matching').dataset.count = String(shown.length);
  }

  // rowCache maps an instance (its cluster, source and ID) to its rendered
  // row and the key it was rendered from.
  let rowCache = new Map();

  // placeRows makes body's children exactly rows, moving only the nodes
  // that are out of place (a moved or removed node loses its focus).
  function placeRows(body, rows) {
    rows.forEach((tr, i) => {
      const at = body.children[i];
      if (at !== tr) body.insertBefore(tr, at || null);
    });
    while (body.children.length > rows.length) body.lastElementChild.remove();
  }

  // buildRow renders one instance's row.
  function buildRow(inst, admin, sources, clusters, now) {
    const tr = document.createElement('tr');
    tr.dataset.id = inst.id;
    if (clusters) tr.dataset.cluster = inst.cluster || '';
    tr.dataset.draining = inst.draining ? 'yes' : 'no';
    tr.dataset.muster = fromMuster(inst) ? 'yes' : 'no';
    if (inst.draining) tr.className = 'draining';
    tr.appendChild(el('td', inst.id !== inst.addr ? inst.id : '', 'id'));
    tr.appendChild(el('td', inst.addr, 'addr'));
    if (clusters) {
      const cl = el('td', inst.cluster || '', 'cluster');
      cl.dataset.cluster = inst.cluster || '';
      tr.appendChild(cl);
    }
    if (sources.length) {
      const src = el('td', inst.source || '', 'source');
      src.dataset.source = inst.source || '';
      tr.appendChild(src);
    }
    tr.appendChild(el('td', inst.zone || '', 'zone'));
    tr.appendChild(el('td', inst.region || '', 'region'));
    tr.appendChild(el('td', inst.version || '', 'version'));
    const c = el('td', inst.color || '', 'color');
    if (inst.color) c.dataset.color = inst.color;
    tr.appendChild(c);
    const w = el('td', inst.weight, 'weight');
    if (inst.override) {
      const m = el('span', ' ✎ override', 'override');
      m.title = 'set by an operator (muster drain/weight); undrain removes it';
      w.appendChild(m);
    }
    tr.appendChild(w);
    tr.appendChild(el('td', inst.draining ? 'draining' : '', 'drain-state'));
    const md = el('td', null, 'metadata');
    for (const k of Object.keys(inst.metadata || {}).sort()) {
      md.appendChild(el('span', k + '=' + inst.metadata[k], 'tag'));
    }
    tr.appendChild(md);
    tr.appendChild(ageCell(inst.registeredAt, now));
    const ttl = el('td', '', 'ttl lease-col');
    if (inst.leaseExpires) ttl.dataset.until = inst.leaseExpires;
    ttl.hidden = !!state.noLeases;
    tr.appendChild(ttl);
    if (admin) tr.appendChild(actionCell(inst));
    return tr;
  }

  // healthText says how fresh a cluster's part of the list is.
  function healthText(c) {
    if (!c.loaded) return 'not loaded';
    if (c.stale) return staleSinceText(c.staleSince);
    return 'fresh';
  }

  // renderClusters shows each cluster of a console over several: its
  // region, health, instances, canary and call policy, which are the
  // cluster's own.
  function renderClusters() {
    const table = document.getElementById('clusters');
    const clusters = multi() ? byName(state.clusters) : [];
    table.hidden = !multi();
    const rows = clusters.map((c) => {
      const tr = el('tr');
      tr.dataset.cluster = c.name;
      const health = !c.loaded ? 'loading' : (c.stale ? 'stale' : 'fresh');
      tr.dataset.health = health;
      tr.appendChild(el('td', c.name, 'name'));
      tr.appendChild(el('td', c.region || '', 'region'));
      const h = el('td', healthText(c), 'health' + (health === 'fresh' ? '' : ' stale'));
      h.dataset.health = health;
      if (c.staleSince) h.title = c.staleSince;
      if (c.error) h.appendChild(el('span', ' (' + c.error + ')', 'error'));
      tr.appendChild(h);
      tr.appendChild(el('td', c.instances, 'count'));
      const can = el('td', c.canary ? c.canary.percent + '% of uncolored calls to ' + c.canary.color : '', 'canary');
      can.dataset.color = c.canary ? c.canary.color : '';
      can.dataset.percent = c.canary ? String(c.canary.percent) : '';
      tr.appendChild(can);
      const pol = el('td', (c.policyFields || []).map((f) => f.name + ' ' + f.value).join(', '), 'policy');
      if (c.policy && c.policy.setBy) {
        pol.title = 'Set by ' + c.policy.setBy + (c.policy.setAt ? ' at ' + c.policy.setAt.replace(/\.\d+Z$/, 'Z') : '');
        pol.dataset.setBy = c.policy.setBy;
      }
      tr.appendChild(pol);
      return tr;
    });
    table.querySelector('tbody').replaceChildren(...rows);
  }

  // fillPolicyCluster offers the clusters whose policy the editor edits,
  // keeping the one chosen; hidden for one cluster.
  function fillPolicyCluster(names) {
    document.getElementById('policy-cluster-box').hidden = names.length === 0;
    policyCluster.hidden = names.length === 0;
    const keep = policyCluster.value;
    const have = [...policyCluster.options].map((o) => o.value);
    if (have.join('\n') !== names.join('\n')) {
      policyCluster.replaceChildren(...names.map((n) => {
        const o = el('option', n);
        o.value = n;
        return o;
      }));
    }
    if (names.length) policyCluster.value = names.includes(keep) ? keep : names[0];
  }

  // editedCluster is the cluster whose policy the editor shows and writes:
  // '' for a console over one cluster.
  function editedCluster() {
    return multi() ? policyCluster.value : '';
  }

  // renderCanary shows the service's canary setting, if any; over
  // several clusters, the clusters' table shows each one's instead.
  function renderCanary() {
    const p = document.getElementById('canary');
    const c = multi() ? null : state.canary;
    p.hidden = !c;
    p.textContent = c ? 'Canary: ' + c.percent + '% of uncolored calls go to ' + c.color + ' (muster canary ' + name + ' off ends it)' : '';
    p.dataset.color = c ? c.color : '';
    p.dataset.percent = c ? String(c.percent) : '';
  }

  // policyFields are the fields of a policy (name, range, about,
  // default), in the order they are shown, for the editor.
  let policyFields = [];

  // buildPolicyEditor makes an input per field; an input being edited is
  // left alone by the updates of the policy until it is saved.
  function buildPolicyEditor() {
    const box = document.getElementById('policy-fields');
    box.replaceChildren(...policyFields.map((f) => {
      const label = el('label', f.name + ' ');
      const input = el('input');
      input.dataset.field = f.name;
      input.placeholder = f.default;
      input.title = f.range + ': ' + f.about + '. Default: ' + f.default + '.';
      input.addEventListener('input', () => { input.dataset.edited = 'yes'; });
      label.appendChild(input);
      return label;
    }));
  }

  // policyValues maps each field the policy sets to its value: the
  // policy of the cluster chosen, over several clusters.
  function policyValues() {
    const values = {};
    let fields = state.policyFields || [];
    if (multi()) {
      const c = state.clusters.find((x) => x.name === editedCluster());
      fields = (c && c.policyFields) || [];
    }
    for (const f of fields) values[f.name] = f.value;
    return values;
  }

  // renderPolicy shows the service's call policy, a field a line as
  // "muster policy" names them, who set it and when, and fills the editor.
  function renderPolicy() {
    const p = document.getElementById('policy');
    // Over several clusters each has its policy, in the clusters' table.
    const pol = multi() ? null : state.policy;
    const fields = multi() ? [] : state.policyFields || [];
    p.hidden = !pol;
    p.textContent = pol ? 'Call policy: ' + fields.map((f) => f.name + ' ' + f.value).join(', ') + ' (muster policy ' + name + ')' : '';
    const by = document.getElementById('policy-by');
    by.hidden = !pol || !pol.setBy;
    by.textContent = pol && pol.setBy ? 'Set by ' + pol.setBy + (pol.setAt ? ' at ' + pol.setAt.replace(/\.\d+Z$/, 'Z') : '') : '';
    by.dataset.setBy = pol && pol.setBy ? pol.setBy : '';
    const none = document.getElementById('no-policy');
    none.hidden = !!pol || !state.loaded || multi();
    none.textContent = 'No call policy (muster policy ' + name + ' set FIELD=VALUE sets one).';
    const values = policyValues();
    document.querySelectorAll('#policy-fields input').forEach((input) => {
      if (input.dataset.edited !== 'yes') input.value = values[input.dataset.field] || '';
    });
  }

  // editPolicy posts a policy edit and shows its result and the command
  // doing the same.
  async function editPolicy(body, cmd) {
    const res = document.getElementById('policy-result');
    const pre = document.getElementById('policy-cmd');
    const cluster = editedCluster();
    if (cluster) body.cluster = cluster;
    pre.textContent = cmd + inFlag(cluster) + prefixFlag();
    pre.hidden = false;
    res.dataset.done = '';
    res.textContent = 'Saving…';
    try {
      await api('policy', body);
      document.querySelectorAll('#policy-fields input').forEach((input) => { delete input.dataset.edited; });
      res.textContent = 'Saved. Equivalent command:';
      res.dataset.done = 'yes';
      renderPolicy();
    } catch (err) {
      res.textContent = 'Failed: ' + err.message;
      res.dataset.done = 'error';
    }
  }

  document.getElementById('policy-edit').addEventListener('submit', (e) => {
    e.preventDefault();
    const values = policyValues();
    const set = [];
    document.querySelectorAll('#policy-fields input').forEach((input) => {
      const v = input.value.trim();
      if (v !== (values[input.dataset.field] || '')) set.push(input.dataset.field + '=' + v);
    });
    if (set.length === 0) {
      document.getElementById('policy-result').textContent = 'Nothing to save: no field changed.';
      return;
    }
    editPolicy({ service: name, set }, 'muster policy ' + shellQuote(name) + ' set ' + set.map(shellQuote).join(' '));
  });
  document.getElementById('policy-clear').addEventListener('click', () =>
    editPolicy({ service: name, clear: true }, 'muster policy ' + shellQuote(name) + ' clear'));
  // Another cluster's policy: the inputs show its values, edits dropped.
  policyCluster.addEventListener('change', () => {
    document.querySelectorAll('#policy-fields input').forEach((input) => { delete input.dataset.edited; });
    document.getElementById('policy-result').textContent = '';
    document.getElementById('policy-cmd').hidden = true;
    renderPolicy();
  });
  fetch('api/policy/fields', { credentials: 'same-origin' }).then((r) => r.json()).then((fs) => {
    policyFields = fs;
    buildPolicyEditor();
    renderPolicy();
  }).catch(() => {});

  // tick refreshes the ages and the lease times without a full render.
  function tick() {
    const now = Date.now();
    document.querySelectorAll('#instances td.age[data-at]').forEach((td) => {
      td.textContent = formatAge(now - Date.parse(td.dataset.at));
    });
    document.querySelectorAll('#instances td.ttl[data-until]').forEach((td) => {
      td.textContent = formatAge(Date.parse(td.dataset.until) - now);
    });
  }

  function renderTimeline() {
    const items = timeline.slice().reverse().map((c) => {
      const li = el('li');
      li.appendChild(el('span', new Date(c.at).toLocaleTimeString() + ' ', 'muted'));
      if (c.cluster) li.dataset.cluster = c.cluster;
      li.appendChild(el('span', c.kind + ' ' + c.id + (c.cluster ? ' in ' + c.cluster : '') + (c.what ? ' (' + c.what + ')' : '')));
      return li;
    });
    document.getElementById('timeline').replaceChildren(...items);
  }

  // renderHistory shows the service's traced operator writes, newest
  // first, as muster history lists them.
  function renderHistory() {
    const recs = state.history || [];
    const clusters = multi();
    document.getElementById('history-name').textContent = name;
    // A registry without a journal (ZooKeeper) says so, once.
    const kept = !state.noHistory;
    document.getElementById('history').hidden = !kept;
    document.getElementById('history-note').hidden = !kept;
    document.getElementById('no-journal').hidden = kept;
    document.getElementById('no-history').hidden = !kept || recs.length > 0;
    const rows = recs.map((r) => {
      const tr = el('tr');
      tr.dataset.revision = String(r.revision);
      tr.dataset.who = r.who;
      tr.dataset.source = r.source;
      tr.dataset.action = r.action;
      const cells = [r.at.replace(/\.\d+Z$/, 'Z'), r.who, r.source, r.action, r.instance || '-', r.before, r.after, r.revision];
      if (clusters) {
        tr.dataset.cluster = r.cluster || '';
        cells.splice(4, 0, r.cluster || '');
      }
      for (const v of cells) {
        tr.appendChild(el('td', v));
      }
      return tr;
    });
    document.querySelector('#history tbody').replaceChildren(...rows);
  }

  const verbs = { drain: 'Drain', undrain: 'Undrain', weight: 'Set the weight of' };

  // commands are the muster command lines doing action on insts, each
  // in its cluster over several.
  function commands(action, insts, weight) {
    return insts.map((inst) => commandFor(action, name, inst.id, weight, inst.cluster)).join('\n');
  }

  // byCluster groups insts by cluster, in the order the clusters first
  // come; one group without a cluster for a console over one.
  function byCluster(insts) {
    const groups = new Map();
    for (const inst of insts) {
      const c = inst.cluster || '';
      if (!groups.has(c)) groups.set(c, []);
      groups.get(c).push(inst.id);
    }
    return groups;
  }

  // run performs an action at once on insts: one request per cluster, each
  // to the cluster holding the instances.
  async function run(action, insts, weight) {
    const res = document.getElementById('result');
    const text = document.getElementById('result-text');
    document.getElementById('result-cmd').textContent = commands(action, insts, weight);
    res.hidden = false;
    const w = Number(weight);
    if (action === 'weight' && (weight === '' || !Number.isInteger(w))) { text.textContent = 'weight: enter a whole number 0..10000'; return; }
    text.textContent = verbs[action] + ' ' + insts.length + ' instance(s)…';
    let done = 0;
    const failed = [];
    const errors = [];
    for (const [cluster, ids] of byCluster(insts)) {
      const body = { action, service: name, ids };
      if (action === 'weight') body.weight = w;
      if (cluster) body.cluster = cluster;
      try {
        const r = await api('action', body);
        done += r.done;
        for (const f of r.failed || []) failed.push((cluster ? f.id + ' in ' + cluster : f.id) + ': ' + f.error);
      } catch (err) {
        errors.push(cluster ? 'in ' + cluster + ' (' + ids.length + ' instance(s)): ' + err.message : err.message);
      }
    }
    if (errors.length && done === 0 && failed.length === 0) {
      text.textContent = 'Failed: ' + errors.join('; ');
      res.dataset.done = 'error';
      return;
    }
    let t = 'Done: ' + verbs[action].toLowerCase() + ' ' + done + ' instance(s). Equivalent command:';
    if (failed.length) t = failed.length + ' failed: ' + failed.join('; ') + '. ' + t;
    if (errors.length) t = 'Failed ' + errors.join('; ') + '. ' + t;
    text.textContent = t;
    res.dataset.done = String(done);
  }

  // confirmBatch asks before acting on every matching instance.
  function confirmBatch(action, weight) {
    const insts = matching().filter(fromMuster).map((i) => ({ id: i.id, cluster: i.cluster }));
    if (insts.length === 0) return;
    const box = document.getElementById('confirm');
    document.getElementById('confirm-text').textContent =
      verbs[action] + ' ' + insts.length + ' matching instance(s) of ' + name + (action === 'weight' ? ' to ' + weight : '') +
      (multi() ? ' in ' + byCluster(insts).size + ' cluster(s)' : '') + '?';
    document.getElementById('confirm-text').dataset.count = String(insts.length);
    document.getElementById('confirm-cmd').textContent = commands(action, insts, weight);
    box.hidden = false;
    const yes = document.getElementById('confirm-yes');
    const no = document.getElementById('confirm-no');
    const done = () => { box.hidden = true; yes.onclick = null; no.onclick = null; };
    yes.onclick = () => { done(); run(action, insts, weight); };
    no.onclick = done;
  }

  document.getElementById('batch-drain').addEventListener('click', () => confirmBatch('drain'));
  document.getElementById('batch-undrain').addEventListener('click', () => confirmBatch('undrain'));
  document.getElementById('batch-weight-set').addEventListener('click', () =>
    confirmBatch('weight', document.getElementById('batch-weight').value));
  const refilter = () => { page = 0; render(); };
  for (const f of [fZone, fRegion, fVersion, fColor, fSource, fCluster]) f.addEventListener('change', refilter);
  fMeta.addEventListener('input', refilter);
  document.getElementById('page-prev').addEventListener('click', () => { page--; render(); });
  document.getElementById('page-next').addEventListener('click', () => { page++; render(); });
  setInterval(tick, 1000);

  initSession(render).catch(() => {});
  follow('api/service/events?name=' + encodeURIComponent(name), (st) => {
    state = st;
    for (const c of st.changes || []) timeline.push(c);
    timeline.splice(0, Math.max(0, timeline.length - maxTimeline));
    staleBanner(st);
    render();
    renderTimeline();
    renderHistory();
  }, (expires) => {
    // Leases are those of Muster's keys: a legacy source's instance with
    // the same ID is not one of them. Over several clusters an instance's
    // key is its cluster and ID.
    const clusters = multi();
    for (const inst of state.instances) {
      const k = clusters ? leaseKey(inst.cluster || '', inst.id) : inst.id;
      if (expires[k] && fromMuster(inst)) inst.leaseExpires = expires[k];
    }
    document.querySelectorAll('#instances tbody tr').forEach((tr) => {
      const at = expires[leaseKey(tr.dataset.cluster, tr.dataset.id)];
      if (at && tr.dataset.muster === 'yes') tr.querySelector('td.ttl').dataset.until = at;
    });
    tick();
  });
})();
