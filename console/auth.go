package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sessionCookie is the name of the admin session's cookie.
const sessionCookie = "muster_console_session"

// csrfHeader carries the CSRF token of state-changing requests.
const csrfHeader = "X-CSRF-Token"

// maxBody bounds the body of a request to the API.
const maxBody = 1 << 20

// auth holds the admin credentials (the token, the users' password
// hashes) and the sessions of those who logged in with them.
type auth struct {
	token string     // empty: no token
	file  *usersFile // WithAdminUsersFile's, read again when it changes; nil: none
	log   *slog.Logger

	mu       sync.Mutex
	users    users                   // empty: no users
	sessions map[string]adminSession // by session ID
}

// adminSession is one login.
type adminSession struct {
	user    string // the user who logged in; empty for the admin token
	csrf    string
	expires time.Time
}

func newAuth(token string, u users, file *usersFile, log *slog.Logger) *auth {
	return &auth{token: token, users: u, file: file, log: log, sessions: map[string]adminSession{}}
}

// enabled reports whether actions can be allowed at all.
func (a *auth) enabled() bool { return a.token != "" || a.hasUsers() }

// hasUsers reports whether users may log in with a password.
func (a *auth) hasUsers() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.users) > 0
}

// refresh takes the users of the users file when it changed, ending the
// sessions of the users it no longer lists or whose password it changed.
func (a *auth) refresh(now time.Time) {
	if a.file == nil {
		return
	}
	u, ok, err := a.file.changed(now)
	if err != nil {
		a.log.Error("console: the users file changed and cannot be read; keeping the users read before", "error", err)
	}
	if !ok {
		return
	}
	a.mu.Lock()
	ended := 0
	for id, s := range a.sessions {
		if s.user != "" && !slices.Equal(u[s.user], a.users[s.user]) {
			delete(a.sessions, id)
			ended++
		}
	}
	a.users = u
	a.mu.Unlock()
	a.log.Info("console: users file read again", "file", a.file.path, "users", len(u), "sessions_ended", ended)
	if weak := u.weak(); len(weak) > 0 {
		a.log.Error(weakHashes, "users", strings.Join(weak, ", "))
	}
}

// credentials are what a login request presents: the admin token, or a
// user and password.
type credentials struct {
	Token    string `json:"token,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
}

// login checks c and, if it is the admin token or a user's password, opens
// a session.
func (a *auth) login(c credentials, now time.Time) (id string, s adminSession, ok bool) {
	a.refresh(now)
	switch {
	case c.User != "":
		a.mu.Lock()
		u := a.users // replaced, never changed in place
		a.mu.Unlock()
		ok = u.check(c.User, c.Password)
	case a.token != "":
		ok = subtle.ConstantTimeCompare([]byte(c.Token), []byte(a.token)) == 1
	}
	if !ok {
		return "", adminSession{}, false
	}
	id, s = rand.Text(), adminSession{user: c.User, csrf: rand.Text(), expires: now.Add(sessionTTL)}
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
	if err != nil {
		return "", adminSession{}, false
	}
	a.refresh(now)
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
// log, and its session.
func (a *auth) authorize(r *http.Request, now time.Time) (who string, s adminSession, ok bool) {
	if !sameOrigin(r) {
		return "", adminSession{}, false
	}
	id, s, ok := a.session(r, now)
	if !ok {
		return "", adminSession{}, false
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(s.csrf)) != 1 {
		return "", adminSession{}, false
	}
	return describeSession(id, s.user) + " from " + r.RemoteAddr, s, true
}

// who is who a change made in session s is recorded as made by in the
// journal: the user, or "admin token"; a policy is recorded as set by it
// "(console)" (registry.Store.Admin).
func (s adminSession) who() string {
	if s.user != "" {
		return s.user
	}
	return "admin token"
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

// describeSession names a session, and its user if any, in logs without
// revealing its cookie.
func describeSession(id, user string) string {
	sum := sha256.Sum256([]byte(id))
	if user != "" {
		return "user " + strconv.Quote(user) + " (session " + hex.EncodeToString(sum[:4]) + ")"
	}
	return "admin session " + hex.EncodeToString(sum[:4])
}

// sessionInfo is what GET /ui/api/session answers.
type sessionInfo struct {
	// Admin is true when actions are possible at all.
	Admin bool `json:"admin"`
	// LoggedIn is true when this browser holds an admin session.
	LoggedIn bool   `json:"loggedIn"`
	CSRF     string `json:"csrf,omitempty"`
	// Users is true when operators log in with a user name and password.
	Users bool `json:"users"`
	// Token is true when an operator can log in with the admin token.
	Token bool `json:"token"`
	// User is the user of this browser's session, if it logged in as one.
	User string `json:"user,omitempty"`
	// Prefix is the registry's key prefix, for the commands shown.
	Prefix string `json:"prefix"`
	// XDS is true when the console has the xDS clients page.
	XDS bool `json:"xds"`
}

// info is the session information for sess (nil: not logged in).
func (s *Server) info(sess *adminSession) sessionInfo {
	info := sessionInfo{Admin: s.auth.enabled(), Users: s.auth.hasUsers(), Token: s.auth.token != "",
		Prefix: s.opts.prefix, XDS: s.opts.xds != nil}
	if sess != nil {
		info.LoggedIn, info.CSRF, info.User = true, sess.csrf, sess.user
	}
	return info
}

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	var sess *adminSession
	if _, found, ok := s.auth.session(r, time.Now()); ok {
		sess = &found
	}
	writeJSON(w, http.StatusOK, s.info(sess))
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if !s.auth.enabled() {
		http.Error(w, "console: read-only: no admin credential is configured", http.StatusForbidden)
		return
	}
	var req credentials
	if !decodeJSON(w, r, &req) {
		return
	}
	done, why := s.logins.admit(r.RemoteAddr, req.User, time.Now())
	if done == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "console: "+why, http.StatusTooManyRequests)
		return
	}
	id, sess, ok := s.auth.login(req, time.Now())
	done(ok)
	if !ok {
		if log, n := s.logins.logRefusal(time.Now()); log {
			s.opts.log.Warn("console: login refused", "user", clipName(req.User), "from", r.RemoteAddr,
				"refused_before_unlogged", n)
		}
		http.Error(w, "console: wrong admin token, user or password", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/ui/", HttpOnly: true,
		Secure: r.TLS != nil || s.opts.secureCookie, SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds()),
	})
	s.opts.log.Info("console: login", "who", describeSession(id, sess.user)+" from "+r.RemoteAddr)
	writeJSON(w, http.StatusOK, s.info(&sess))
}

// clipName is a user name a client sent, for the log: at most 64 bytes.
func clipName(name string) string {
	if len(name) <= 64 {
		return name
	}
	return strings.ToValidUTF8(name[:64], "") + "..."
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := s.auth.authorize(r, time.Now()); !ok {
		http.Error(w, "console: not logged in", http.StatusForbidden)
		return
	}
	id, _, _ := s.auth.session(r, time.Now())
	s.auth.logout(id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", MaxAge: -1})
	writeJSON(w, http.StatusOK, s.info(nil))
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
