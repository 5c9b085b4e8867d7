// Shared by the console's pages. Every value that comes from the registry
// is put in the page with textContent or as an attribute value, never as
// HTML.
'use strict';

const muster = {
  session: { admin: false, loggedIn: false, csrf: '', prefix: '/muster/services' },
};

// el makes an element with text (as text) and a class.
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function formatAge(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 120) return m + 'm';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h';
  return Math.floor(h / 24) + 'd';
}

function setBanner(text) {
  const b = document.getElementById('banner');
  b.textContent = text || '';
  b.hidden = !text;
}

// follow opens an event stream on url and calls onState with each state
// event's data (and onLeases, if given, with each leases event's). It shows the banner while the stream is down, and opens a
// new stream (resuming from the last revision) if the browser gives up.
function follow(url, onState, onLeases) {
  let lastId = '';
  let es = null;
  const open = () => {
    const u = lastId ? url + (url.includes('?') ? '&' : '?') + 'lastEventId=' + encodeURIComponent(lastId) : url;
    es = new EventSource(u);
    es.addEventListener('state', (e) => {
      lastId = e.lastEventId || lastId;
      const st = JSON.parse(e.data);
      document.body.dataset.revision = lastId;
      onState(st);
    });
    if (onLeases) es.addEventListener('leases', (e) => onLeases(JSON.parse(e.data)));
    es.addEventListener('resumed', (e) => {
      lastId = e.lastEventId || lastId;
      document.body.dataset.revision = lastId;
      setBanner('');
    });
    es.onopen = () => { document.body.dataset.stream = 'open'; };
    es.onerror = () => {
      document.body.dataset.stream = 'down';
      setBanner('Console connection lost: the list may be stale. Reconnecting…');
      if (es.readyState === EventSource.CLOSED) {
        setTimeout(open, 1000);
      }
    };
  };
  open();
}

// staleBanner shows or clears the banner for a state from the server.
function staleBanner(st) {
  if (st.stale) {
    let t = 'Registry unreachable';
    if (st.staleSince) t += ' since ' + new Date(st.staleSince).toLocaleTimeString();
    t += st.loaded === false ? ': nothing loaded yet. Reconnecting…' : ': showing the last known state (stale). Reconnecting…';
    if (st.error) t += ' (' + st.error + ')';
    setBanner(t);
  } else {
    setBanner('');
  }
}

async function api(path, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (muster.session.csrf) headers['X-CSRF-Token'] = muster.session.csrf;
  const r = await fetch('api/' + path, { method: 'POST', headers, body: JSON.stringify(body), credentials: 'same-origin' });
  const text = await r.text();
  if (!r.ok) throw new Error(text.trim() || r.statusText);
  return JSON.parse(text);
}

// initSession reads the session and sets up the header; onChange runs
// after it and after each login or logout.
async function initSession(onChange) {
  const r = await fetch('api/session', { credentials: 'same-origin' });
  muster.session = await r.json();
  const mode = document.getElementById('mode');
  const login = document.getElementById('login');
  const logout = document.getElementById('logout');
  const render = () => {
    const s = muster.session;
    mode.textContent = !s.admin ? 'read-only' : (s.loggedIn ? (s.user ? 'admin: ' + s.user : 'admin') : 'read-only until you log in');
    document.getElementById('user').hidden = !s.users;
    document.getElementById('token').placeholder = !s.users ? 'admin token' : (s.token ? 'password, or admin token without user' : 'password');
    login.hidden = !s.admin || s.loggedIn;
    logout.hidden = !s.loggedIn;
    document.body.dataset.admin = s.loggedIn ? 'yes' : 'no';
    document.getElementById('xds-link').hidden = !s.xds;
    onChange();
  };
  login.addEventListener('submit', async (e) => {
    e.preventDefault();
    const tok = document.getElementById('token');
    const user = document.getElementById('user');
    const creds = user.value ? { user: user.value, password: tok.value } : { token: tok.value };
    try {
      muster.session = await api('login', creds);
      tok.value = '';
    } catch (err) {
      mode.textContent = 'login failed: ' + err.message;
      return;
    }
    render();
  });
  logout.addEventListener('click', async () => {
    try { muster.session = await api('logout', {}); } catch (err) { mode.textContent = err.message; return; }
    render();
  });
  render();
}

// shellQuote quotes s for a POSIX shell when it needs it.
function shellQuote(s) {
  return /^[A-Za-z0-9._:@%+=,-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
}

// prefixFlag is the --prefix flag of the muster commands shown, or ''
// for the default prefix.
function prefixFlag() {
  return muster.session.prefix !== '/muster/services' ? ' --prefix ' + shellQuote(muster.session.prefix) : '';
}

// inFlag is the --in flag naming cluster, the one of several etcd
// clusters a muster command writes to, or '' for none (one cluster).
function inFlag(cluster) {
  return cluster ? ' --in ' + shellQuote(cluster) : '';
}

// commandFor is the muster command line doing action on one instance, in
// cluster if given (a console over several clusters).
function commandFor(action, service, id, weight, cluster) {
  let c = 'muster ' + action + ' ' + shellQuote(service) + ' ' + shellQuote(id);
  if (action === 'weight') c += ' ' + weight;
  return c + inFlag(cluster) + prefixFlag();
}

// byName sorts the clusters a state lists by name (a copy).
function byName(clusters) {
  return (clusters || []).slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

// staleSinceText says since when a cluster is stale: "stale since <local
// time>", or "stale" when the time is unknown.
function staleSinceText(iso) {
  return iso ? 'stale since ' + new Date(iso).toLocaleTimeString() : 'stale';
}
