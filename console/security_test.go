package console_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/console"
)

// loginAs logs c in as user and keeps the session's CSRF token.
func (c *client) loginAs(user, password string) {
	c.t.Helper()
	code, body := c.post("login", map[string]string{"user": user, "password": password})
	if code != http.StatusOK {
		c.t.Fatalf("login as %s: %d %s", user, code, body)
	}
	var info struct {
		CSRF string `json:"csrf"`
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil || info.CSRF == "" {
		c.t.Fatalf("login answer %s: %v", body, err)
	}
	c.csrf = info.CSRF
}

// loginWithToken logs the client in with the admin token and keeps the
// session's CSRF token.
func (c *client) loginWithToken() {
	c.t.Helper()
	code, body := c.post("login", map[string]string{"token": adminToken})
	var info struct {
		CSRF string `json:"csrf"`
	}
	if err := json.Unmarshal([]byte(body), &info); code != http.StatusOK || err != nil {
		c.t.Fatalf("login: %d %s", code, body)
	}
	c.csrf = info.CSRF
}

// postWith posts body to the API path with the client's cookies and the
// given headers only (no CSRF token of its own).
func (c *client) postWith(path string, body any, header map[string]string) int {
	c.t.Helper()
	data, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, c.url+"api/"+path, bytes.NewReader(data))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// forged are the headers of requests that carry a logged-in session's
// cookie but must be refused: no CSRF token, a wrong one, or the session's
// token (csrf) from another origin.
type forged struct {
	what   string
	header map[string]string
}

func forgedHeaders(csrf string) []forged {
	return []forged{
		{"no CSRF token", nil},
		{"a wrong CSRF token", map[string]string{"X-CSRF-Token": "not-the-session-token"}},
		{"the token from a foreign origin", map[string]string{"X-CSRF-Token": csrf, "Origin": "http://attacker.example"}},
	}
}

// An action needs the session's own CSRF token, not any token, and is
// refused from another origin, even with the right token (each check
// removed makes its case fail: a wrong non-empty token, or a foreign
// Origin, is then served).
func TestActionNeedsItsCSRFTokenAndOrigin(t *testing.T) {
	f := newFixture(t, console.WithAdminUsers(htpasswd(t, "alice", "correct horse")))
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	c := newClient(t, f.url)
	c.loginAs("alice", "correct horse")
	drain := map[string]any{"action": "drain", "service": "payments", "ids": []string{"10.0.0.1:9001"}}
	for _, tc := range forgedHeaders(c.csrf) {
		if code := c.postWith("action", drain, tc.header); code != http.StatusForbidden {
			t.Errorf("an action with %s: %d, want 403", tc.what, code)
		}
	}
	if f.override("payments", "10.0.0.1:9001") != "" {
		t.Fatal("a refused action drained the instance")
	}
	if code := c.postWith("action", drain, map[string]string{"X-CSRF-Token": c.csrf}); code != http.StatusOK {
		t.Errorf("the action with the session's token from the console's origin: %d, want 200", code)
	}
}

// A request whose Host is not one the console answers to is refused (DNS
// rebinding), for pages, streams and login alike; WithAllowedHosts adds a
// name, and loopback names are always answered.
func TestHostAllowlist(t *testing.T) {
	f := newFixture(t, console.WithAllowedHosts("console.example"))
	get := func(path, host string) int {
		req, _ := http.NewRequest(http.MethodGet, f.url+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"attacker.example", "attacker.example:80", "10.9.9.9"} {
		for _, path := range []string{"", "api/session", "api/services/events"} {
			if code := get(path, host); code != http.StatusMisdirectedRequest {
				t.Errorf("GET /ui/%s with Host %s: %d, want 421", path, host, code)
			}
		}
	}
	for _, host := range []string{"localhost:1234", "127.0.0.1", "[::1]:8080", "CONSOLE.example:443"} {
		if code := get("api/session", host); code != http.StatusOK {
			t.Errorf("GET /ui/api/session with Host %s: %d, want 200", host, code)
		}
	}
	if _, err := console.New(etcdStore(t, f.cli), console.WithAllowedHosts("")); err == nil {
		t.Error("WithAllowedHosts(\"\") accepted")
	}
}

// A login flood from one address gets 429 after a burst, and the refused
// user names are logged clipped and rate-limited; WithSecureCookie marks
// the session cookie Secure behind a TLS proxy.
func TestLoginFloodAndSecureCookie(t *testing.T) {
	f := newFixture(t, console.WithAdminUsers(htpasswd(t, "alice", "correct horse")), console.WithSecureCookie())
	c := newClient(t, f.url)
	long := strings.Repeat("u", 900<<10) // a 900 KB user name
	var tooMany, refused int
	start := time.Now()
	for range 40 {
		switch code := c.postWith("login", map[string]string{"user": long, "password": "guess"}, nil); code {
		case http.StatusTooManyRequests:
			tooMany++
		case http.StatusForbidden:
			refused++
		default:
			t.Fatalf("a wrong login: %d", code)
		}
	}
	took := time.Since(start)
	t.Logf("40 wrong logins in %v: %d refused (checked), %d turned away (429)", took, refused, tooMany)
	// The burst, and one more for each second the loop took (the race
	// detector slows each check).
	if most := 10 + int(took/time.Second) + 1; refused > most || tooMany < 40-most {
		t.Errorf("40 wrong logins in %v: %d checked, %d turned away; want at most %d checked (the burst of 10 and one a second)",
			took, refused, tooMany, most)
	}
	if n := len(f.log.String()); n > 16<<10 {
		t.Errorf("%d bytes logged for the flood; want the user names clipped and the lines rate-limited", n)
	}
	// A later login from another client address is not held back: the
	// bound is per address (here all come from 127.0.0.1, so wait for the
	// bucket instead).
	resp := func() *http.Response {
		data, _ := json.Marshal(map[string]string{"user": "alice", "password": "correct horse"})
		for range 50 {
			req, _ := http.NewRequest(http.MethodPost, f.url+"api/login", bytes.NewReader(data))
			req.Header.Set("Content-Type", "application/json")
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if r.StatusCode != http.StatusTooManyRequests {
				return r
			}
			_ = r.Body.Close()
			waitABit()
		}
		t.Fatal("still 429 after 50 tries")
		return nil
	}()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login as alice after the flood: %s", resp.Status)
	}
	var secure bool
	for _, ck := range resp.Cookies() {
		secure = secure || ck.Secure
	}
	if !secure {
		t.Error("WithSecureCookie: the session cookie is not Secure over plain HTTP")
	}
}

// waitABit paces a retry of a login held back for a second.
func waitABit() { time.Sleep(100 * time.Millisecond) }
