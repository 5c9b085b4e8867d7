package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// sessionCookie is the name of the admin session's cookie.
const sessionCookie = "muster_console_session"

// csrfHeader carries the CSRF token of state-changing requests.
const csrfHeader = "X-CSRF-Token"

// maxBody bounds the body of a request to the API.
const maxBody = 1 << 20

// auth holds the admin token and the sessions of those who logged in with
// it.
type auth struct {
	token string // empty: read-only

	mu       sync.Mutex
	sessions map[string]adminSession // by session ID
}

// adminSession is one login.
type adminSession struct {
	csrf    string
	expires time.Time
}

func newAuth(token string) *auth {
	return &auth{token: token, sessions: map[string]adminSession{}}
}

// enabled reports whether actions can be allowed at all.
func (a *auth) enabled() bool { return a.token != "" }

// login checks token and, if it is the admin token, opens a session.
func (a *auth) login(token string, now time.Time) (id string, s adminSession, ok bool) {
	if !a.enabled() || subtle.ConstantTimeCompare([]byte(token), []byte(a.token)) != 1 {
		return "", adminSession{}, false
	}
	id, s = rand.Text(), adminSession{csrf: rand.Text(), expires: now.Add(sessionTTL)}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, old := range a.sessions {
		if now.After(old.expires) {
			delete(a.sessions, k)
		}
	}
	a.sessions[id] = s
	return id, s, true
}

// session returns the live session r's cookie names.
func (a *auth) session(r *http.Request, now time.Time) (id string, s adminSession, ok bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !a.enabled() {
		return "", adminSession{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok = a.sessions[c.Value]
	if !ok || now.After(s.expires) {
		return "", adminSession{}, false
	}
	return c.Value, s, true
}

// authorize checks that r comes from a logged-in admin and carries the
// session's CSRF token (and, if the browser says where the request comes
// from, that it is the console's own origin), and returns who it is for the
// log.
func (a *auth) authorize(r *http.Request, now time.Time) (who string, ok bool) {
	if !sameOrigin(r) {
		return "", false
	}
	id, s, ok := a.session(r, now)
	if !ok {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(s.csrf)) != 1 {
		return "", false
	}
	return describeSession(id) + " from " + r.RemoteAddr, true
}

// sameOrigin reports whether r's Origin header, if any, names the host r
// was sent to.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

func (a *auth) logout(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, id)
}

// describeSession names a session in logs without revealing its cookie.
func describeSession(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "admin session " + hex.EncodeToString(sum[:4])
}

// sessionInfo is what GET /ui/api/session answers.
type sessionInfo struct {
	// Admin is true when actions are possible at all.
	Admin bool `json:"admin"`
	// LoggedIn is true when this browser holds an admin session.
	LoggedIn bool   `json:"loggedIn"`
	CSRF     string `json:"csrf,omitempty"`
	// Prefix is the registry's key prefix, for the commands shown.
	Prefix string `json:"prefix"`
	// XDS is true when the console has the xDS clients page.
	XDS bool `json:"xds"`
}

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	info := sessionInfo{Admin: s.auth.enabled(), Prefix: s.opts.prefix, XDS: s.opts.xds != nil}
	if _, sess, ok := s.auth.session(r, time.Now()); ok {
		info.LoggedIn, info.CSRF = true, sess.csrf
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if !s.auth.enabled() {
		http.Error(w, "console: read-only: no admin token is configured", http.StatusForbidden)
		return
	}
	var req struct {
		Token string `json:"token"`
	}
	if !decodeJSON(w, r, &req) {
		return
	}
	id, sess, ok := s.auth.login(req.Token, time.Now())
	if !ok {
		s.opts.log.Warn("console: login refused", "from", r.RemoteAddr)
		http.Error(w, "console: wrong admin token", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/ui/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds()),
	})
	s.opts.log.Info("console: login", "who", describeSession(id)+" from "+r.RemoteAddr)
	writeJSON(w, http.StatusOK, sessionInfo{Admin: true, LoggedIn: true, CSRF: sess.csrf, Prefix: s.opts.prefix, XDS: s.opts.xds != nil})
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.auth.authorize(r, time.Now()); !ok {
		http.Error(w, "console: not logged in", http.StatusForbidden)
		return
	}
	id, _, _ := s.auth.session(r, time.Now())
	s.auth.logout(id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", MaxAge: -1})
	writeJSON(w, http.StatusOK, sessionInfo{Admin: true, Prefix: s.opts.prefix, XDS: s.opts.xds != nil})
}

// decodeJSON reads r's JSON body into v, or answers 400 and returns
// false. A JSON content type is required: a cross-site form cannot send
// one without the browser asking first.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "console: want Content-Type application/json", http.StatusUnsupportedMediaType)
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "console: bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
