package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/registry"
)

// consoleToken is the admin token of these tests' consoles.
const consoleToken = "cmd-test-admin-token-0123"

// tokenFile writes consoleToken to a file and returns its path.
func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(consoleToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startConsole runs muster console on endpoint until the end of the test
// and returns its URL.
func startConsole(t *testing.T, endpoint string, o consoleOptions) string {
	t.Helper()
	g := &globalOptions{endpoints: []string{endpoint}, prefix: registry.DefaultPrefix, timeout: defaultTimeout}
	if err := g.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	stderr := &syncBuffer{}
	go func() { done <- runConsole(ctx, g, o, stderr, func(url string) { ready <- url }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runConsole after cancel = %v; stderr:\n%s", err, stderr)
		}
	})
	select {
	case url := <-ready:
		return url
	case err := <-done:
		t.Fatalf("runConsole = %v before it was ready; stderr:\n%s", err, stderr)
	case <-time.After(waitTimeout):
		t.Fatalf("console not ready within %v; stderr:\n%s", waitTimeout, stderr)
	}
	return ""
}

// post sends a JSON POST with the CSRF token csrf (if not empty) and
// returns the status and body.
func post(t *testing.T, c *http.Client, url, csrf string, body any) (int, string) {
	t.Helper()
	return postFrom(t, c, url, csrf, "", body)
}

// postFrom is post with the Origin header origin (if not empty).
func postFrom(t *testing.T, c *http.Client, url, csrf, origin string, body any) (int, string) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestConsoleCommandServesAndActsWithTheAdminToken(t *testing.T) {
	s := startServe(t, t.TempDir())
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "payments", Addr: "10.0.0.1:9001"})
	url := startConsole(t, s.endpoint, consoleOptions{listen: "127.0.0.1:0", consoleFlags: consoleFlags{tokenFile: tokenFile(t)}})

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: waitTimeout}
	resp, err := c.Get(strings.TrimSuffix(url, consolePath) + "/")
	if err != nil {
		t.Fatalf("GET /: %v", err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != consolePath || !strings.Contains(string(page), "Muster console") {
		t.Fatalf("GET / ended at %s with %q, want the console page", resp.Request.URL, page)
	}
	action := map[string]any{"action": "drain", "service": "payments", "ids": []string{"10.0.0.1:9001"}}
	if code, _ := post(t, c, url+"api/action", "", action); code != http.StatusForbidden {
		t.Errorf("action before login: status %d, want 403", code)
	}
	if code, _ := post(t, c, url+"api/login", "", map[string]string{"token": "wrong-token-0123456789"}); code != http.StatusForbidden {
		t.Errorf("login with a wrong token: status %d, want 403", code)
	}
	code, body := post(t, c, url+"api/login", "", map[string]string{"token": consoleToken})
	var sess struct{ CSRF string }
	if err := json.Unmarshal([]byte(body), &sess); code != http.StatusOK || err != nil || sess.CSRF == "" {
		t.Fatalf("login: status %d, body %q", code, body)
	}
	if code, _ := post(t, c, url+"api/action", "", action); code != http.StatusForbidden {
		t.Errorf("action without CSRF token: status %d, want 403", code)
	}
	if code, _ := postFrom(t, c, url+"api/action", sess.CSRF, "http://evil.example", action); code != http.StatusForbidden {
		t.Errorf("action from another origin: status %d, want 403", code)
	}
	if code, body := post(t, c, url+"api/action", sess.CSRF, action); code != http.StatusOK || !strings.Contains(body, `"done":1`) {
		t.Fatalf("action: status %d, body %q", code, body)
	}
	r := runOK(t, "get", "payments", "10.0.0.1:9001", "--endpoints", s.endpoint, "-o", "json")
	if !regexp.MustCompile(`"weight":\s*0\b`).MatchString(r.stdout) {
		t.Errorf("muster get after the console's drain: %s, want weight 0", r.stdout)
	}

	for _, args := range [][]string{
		{"console", "--listen", "no-port"},
		{"console", "--console-admin-token-file", filepath.Join(t.TempDir(), "missing")},
		{"serve", "--metrics-listen", "", "--console-admin-token-file", tokenFile(t)},
	} {
		if r := run(args...); r.code != exitUsage {
			t.Errorf("muster %v: exit code %d, want %d (usage); stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// The console of muster serve follows the registry across a restart of
// serve: the page shows that it lost the connection, then the current list.
func TestConsoleOfServeResumesAfterServeRestarts(t *testing.T) {
	urls := freeLoopbackURLs(t, 3)
	s, err := tryServe(t, serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "test",
		metricsAddr: strings.TrimPrefix(urls[2], "http://")})
	if err != nil {
		t.Fatalf("serve did not start: %v", err)
	}
	m := regexp.MustCompile(`console on (http://\S+/ui/)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("serve's log does not say where the console is:\n%s", s.stderr)
	}
	ui := m[1]
	reg := newRegistrar(t, s.endpoint)
	register(t, reg, registry.Instance{Name: "payments", Addr: "10.0.0.1:9001"})

	b := browsertest.Start(t)
	row := func(id string) string {
		return `document.querySelector('#instances tr[data-id="` + id + `"]') !== null`
	}
	b.Do(waitTimeout, "the service page of serve's console lists the instance",
		chromedp.Navigate(ui+"?name=payments"), browsertest.WaitJS(row("10.0.0.1:9001")))
	s.stop(t)
	b.Do(waitTimeout, "the page says it lost the connection",
		browsertest.WaitJS(`!document.querySelector('#banner').hidden`))
	b.Screenshot("serve-stopped")
	s2 := restartServe(t, s)
	register(t, reg, registry.Instance{Name: "payments", Addr: "10.0.0.2:9002"})
	b.Do(waitTimeout, "after the restart the page shows the current list and no banner",
		browsertest.WaitJS(row("10.0.0.1:9001")+" && "+row("10.0.0.2:9002")),
		browsertest.WaitJS(`document.querySelector('#banner').hidden`))
	s2.stop(t)
}

// muster console --console-admin-basic-auth-file: an operator of the file
// logs in with their password and acts, logged by name; a file that is not
// of bcrypt hashes is a usage error.
func TestConsoleCommandBasicAuthFile(t *testing.T) {
	s := startServe(t, t.TempDir())
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "payments", Addr: "10.0.0.1:9001"})
	dir := t.TempDir()
	users := aliceUsersFile(t, dir)
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("alice:correct horse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startConsole(t, s.endpoint, consoleOptions{listen: "127.0.0.1:0", consoleFlags: consoleFlags{usersFile: users}})
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: waitTimeout}
	if code, _ := post(t, c, url+"api/login", "", map[string]string{"user": "alice", "password": "wrong"}); code != http.StatusForbidden {
		t.Errorf("login with a wrong password: status %d, want 403", code)
	}
	csrf := loginAlice(t, c, url)
	action := map[string]any{"action": "drain", "service": "payments", "ids": []string{"10.0.0.1:9001"}}
	if code, _ := post(t, c, url+"api/action", "", action); code != http.StatusForbidden {
		t.Errorf("action without CSRF token: status %d, want 403", code)
	}
	if code, body := post(t, c, url+"api/action", csrf, action); code != http.StatusOK || !strings.Contains(body, `"done":1`) {
		t.Fatalf("action: status %d, body %q", code, body)
	}
	for _, args := range [][]string{
		{"console", "--console-admin-basic-auth-file", plain},
		{"console", "--console-admin-basic-auth-file", filepath.Join(dir, "missing")},
		{"serve", "--metrics-listen", "", "--console-admin-basic-auth-file", users},
	} {
		if r := run(args...); r.code != exitUsage || strings.Contains(r.stderr, "correct horse") {
			t.Errorf("muster %v: exit code %d, want %d (usage) without the password; stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// aliceUsersFile writes in dir an htpasswd file of the user alice with
// the password "correct horse", and returns its path.
func aliceUsersFile(t *testing.T, dir string) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte("alice:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return users
}

// loginAlice logs c in to the console at url as alice (aliceUsersFile)
// and returns the session's CSRF token.
func loginAlice(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	code, body := post(t, c, url+"api/login", "", map[string]string{"user": "alice", "password": "correct horse"})
	var sess struct{ CSRF, User string }
	if err := json.Unmarshal([]byte(body), &sess); code != http.StatusOK || err != nil || sess.CSRF == "" || sess.User != "alice" {
		t.Fatalf("login: status %d, body %q", code, body)
	}
	return sess.CSRF
}
