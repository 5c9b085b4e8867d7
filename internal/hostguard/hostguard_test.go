package hostguard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A Guard answers to loopback names, its listener's own IP address (not
// an unspecified one) and the hosts it is given, with any port and in any
// case; to nothing else.
func TestAllowed(t *testing.T) {
	g, err := New("10.0.0.5:2381", "Console.example", "[fd00::7]")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:80": true, "127.0.0.1": true, "127.0.0.2:9": true, "[::1]:8080": true,
		"10.0.0.5": true, "10.0.0.5:2381": true, "console.example:443": true, "CONSOLE.EXAMPLE": true, "[fd00::7]:1": true,
		"attacker.example": false, "attacker.example:2381": false, "10.0.0.6": false, "": false, "console.example.attacker.example": false,
	} {
		if got := g.Allowed(host); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", host, got, want)
		}
	}
	if wild, _ := New("0.0.0.0:2381"); wild.Allowed("0.0.0.0") || wild.Allowed("10.0.0.5") {
		t.Error("a listener on every address answers to an address it was not given")
	}
	for _, bad := range []string{"", "a/b", "a b"} {
		if _, err := New("", bad); err == nil || !strings.Contains(err.Error(), "not a host name") {
			t.Errorf("New(%q): %v, want an error naming it", bad, err)
		}
	}
}

// Handler refuses another host with 421 naming it and the way to add it,
// and serves an allowed one.
func TestHandler(t *testing.T) {
	g, _ := New("")
	h := g.Handler("this listener", "--metrics-host", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Host = "rebind.example"
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusMisdirectedRequest || !strings.Contains(rec.Body.String(), `"rebind.example"`) ||
		!strings.Contains(rec.Body.String(), "--metrics-host") {
		t.Errorf("another host: %d %q, want 421 naming it and --metrics-host", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	r.Host = "127.0.0.1:9"
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Errorf("loopback: %d, want 200", rec.Code)
	}
}
