package console_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
)

// htpasswd is an htpasswd text of bcrypt hashes (at bcrypt's least cost,
// for speed) of the users and passwords given as pairs.
func htpasswd(t *testing.T, userPass ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# console operators\n\n")
	for i := 0; i < len(userPass); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(userPass[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(userPass[i] + ":" + string(h) + "\n")
	}
	return b.String()
}

// client is an HTTP client of the console with its own cookies.
type client struct {
	t    *testing.T
	http *http.Client
	url  string
	csrf string
}

func newClient(t *testing.T, url string) *client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, http: &http.Client{Jar: jar, Timeout: waitTimeout}, url: url}
}

// post sends body as JSON to the API path with the client's CSRF token,
// and returns the status and the body.
func (c *client) post(path string, body any) (int, string) {
	c.t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.url+"api/"+path, bytes.NewReader(data))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.csrf != "" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// Operators of an htpasswd file log in with their password; actions need
// the session and its CSRF token, and are logged with the user's name.
func TestConsoleUsersLogInAndAct(t *testing.T) {
	f := newFixture(t, console.WithAdminUsers(htpasswd(t, "alice", "correct horse", "bob", "battery staple")))
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	c := newClient(t, f.url)
	drain := map[string]any{"action": "drain", "service": "payments", "ids": []string{"10.0.0.1:9001"}}
	for _, creds := range []map[string]string{
		{"user": "alice", "password": "battery staple"},
		{"user": "carol", "password": "correct horse"},
		{"user": "alice", "password": ""},
		{"token": "correct horse"},
		{"token": ""},
	} {
		if code, body := c.post("login", creds); code != http.StatusForbidden {
			t.Errorf("login %v: %d %s, want 403", creds, code, body)
		}
	}
	if code, _ := c.post("action", drain); code != http.StatusForbidden {
		t.Errorf("action before login: %d, want 403", code)
	}
	code, body := c.post("login", map[string]string{"user": "alice", "password": "correct horse"})
	if code != http.StatusOK {
		t.Fatalf("login as alice: %d %s", code, body)
	}
	var info struct {
		LoggedIn bool   `json:"loggedIn"`
		CSRF     string `json:"csrf"`
		User     string `json:"user"`
		Users    bool   `json:"users"`
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil || !info.LoggedIn || info.CSRF == "" || info.User != "alice" || !info.Users {
		t.Fatalf("login answer %s (%v): want alice logged in with a CSRF token", body, err)
	}
	if code, _ := c.post("action", drain); code != http.StatusForbidden {
		t.Errorf("action without the CSRF token: %d, want 403", code)
	}
	c.csrf = info.CSRF
	if code, body := c.post("action", drain); code != http.StatusOK {
		t.Fatalf("action as alice: %d %s", code, body)
	}
	if got := f.override("payments", "10.0.0.1:9001"); !strings.Contains(got, `"weight":0`) {
		t.Errorf("override in etcd = %q, want weight 0", got)
	}
	// The drain is traced in the journal (muster history): alice, from
	// the console, in the same transaction as the override.
	recs := f.history("payments")
	if len(recs) != 1 {
		t.Fatalf("journal after alice's drain: %+v, want one record", recs)
	}
	if r := recs[0]; r.Who != "alice" || r.Source != registry.SourceConsole || r.Action != registry.ActionDrain ||
		r.Instance != "10.0.0.1:9001" || string(r.Before) != "null" || !strings.Contains(string(r.After), `"weight":0`) ||
		r.Revision != f.overrideRevision("payments", "10.0.0.1:9001") {
		t.Errorf("alice's drain recorded as %+v, want alice, console, drain, null -> weight 0 at the override's revision", r)
	}
	logs := f.log.String()
	if !strings.Contains(logs, `msg="console: action" who="user \"alice\" (session `) {
		t.Errorf("the action is not logged with alice's name:\n%s", logs)
	}
	if !strings.Contains(logs, `msg="console: login refused" user=carol`) {
		t.Errorf("the refused login of carol is not logged:\n%s", logs)
	}
}

// The token and the users can be given together.
func TestConsoleUsersAndToken(t *testing.T) {
	f := newFixture(t, console.WithAdminToken(adminToken), console.WithAdminUsers(htpasswd(t, "alice", "correct horse")))
	c := newClient(t, f.url)
	if code, body := c.post("login", map[string]string{"token": adminToken}); code != http.StatusOK || strings.Contains(body, `"user"`) {
		t.Errorf("login with the token: %d %s, want a session with no user", code, body)
	}
	c = newClient(t, f.url)
	if code, body := c.post("login", map[string]string{"user": "alice", "password": adminToken}); code != http.StatusForbidden {
		t.Errorf("alice with the token as password: %d %s, want 403", code, body)
	}
}

func TestConsoleUsersLoginForm(t *testing.T) {
	f := newFixture(t, console.WithAdminUsers(htpasswd(t, "alice", "correct horse")))
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", rowJS("10.0.0.1:9001")+` !== null`)
	b.Do(browsertest.Timeout, "log in as alice and drain",
		chromedp.WaitVisible(chromedp.CSS("#user")),
		chromedp.SendKeys(chromedp.CSS("#user"), "alice"),
		chromedp.SendKeys(chromedp.CSS("#token"), "correct horse"),
		chromedp.Click(chromedp.CSS("#login button")),
		browsertest.WaitJS(`document.body.dataset.admin === 'yes' && document.querySelector('#mode').textContent === 'admin: alice'`),
		chromedp.Click(chromedp.CSS(row("10.0.0.1:9001")+" button.drain")),
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.dataset.draining === 'yes'`),
	)
	if !strings.Contains(f.log.String(), `who="user \"alice\"`) {
		t.Errorf("the drain is not logged with alice's name:\n%s", f.log.String())
	}
}

func TestConsoleWithAdminUsersRejectsBadFiles(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	good := htpasswd(t, "alice", "pw")
	hash := strings.TrimSpace(strings.SplitN(good, "alice:", 2)[1])
	for name, text := range map[string]string{
		"empty":          "",
		"only comments":  "# nobody\n",
		"plain password": "alice:secret\n",
		"md5 hash":       "alice:$apr1$abc$0123456789012345678901\n",
		"no colon":       "alice\n",
		"empty user":     ":" + hash + "\n",
		"space in user":  "al ice:" + hash + "\n",
		"twice":          "alice:" + hash + "\nalice:" + hash + "\n",
	} {
		if s, err := console.New(etcdStore(t, cli), console.WithAdminUsers(text)); err == nil {
			_ = s.Close()
			t.Errorf("%s: New succeeded, want an error", name)
		} else if !strings.HasPrefix(err.Error(), "console: WithAdminUsers: ") {
			t.Errorf("%s: error %q, want it prefixed with console: WithAdminUsers", name, err)
		}
	}
	s, err := console.New(etcdStore(t, cli), console.WithAdminUsers(good))
	if err != nil {
		t.Fatalf("New with a good file: %v", err)
	}
	_ = s.Close()
}

// A password hash of a bcrypt cost below 10 is logged at error level at
// New, naming its user and the command that hashes it again; a hash of
// cost 10 is not.
func TestWeakHashesLogged(t *testing.T) {
	c := etcdtest.Start(t)
	var logs bytes.Buffer
	strong, err := bcrypt.GenerateFromPassword([]byte("secret"), 10)
	if err != nil {
		t.Fatal(err)
	}
	s, err := console.New(etcdStore(t, c.Client(t)), console.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		console.WithAdminUsers(htpasswd(t, "alice", "a")+"bob:"+string(strong)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "alice (cost 4)") ||
		!strings.Contains(out, "htpasswd -B -C 12") || strings.Contains(out, "bob") {
		t.Errorf("log %q: want one error naming alice (cost 4) and not bob (cost 10), with the command", out)
	}
}
