package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// Every HTTP listener of the command answers only to the hosts it is
// reached by (loopback, its own address, and --console-host or
// --metrics-host), on every path: a page whose name an attacker rebinds to
// the listener's address (DNS rebinding) gets 421 for the console, the
// registry's targets (/prometheus/sd), /metrics, /healthz, /livez and
// /readyz alike, from muster serve, muster console and muster xds and
// register --metrics-listen.
func TestRebindingRefusedOnEveryListener(t *testing.T) {
	urls := freeLoopbackURLs(t, 2)
	s, err := tryServe(t, serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "r",
		metricsAddr: "127.0.0.1:0", console: consoleFlags{hosts: []string{"registry.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	metricsAt := func(stderr interface{ String() string }) string {
		t.Helper()
		return waitLogged(t, stderr, `metrics on http://([0-9.:]+)/metrics`)
	}
	consoleURL := startConsole(t, s.endpoint, consoleOptions{listen: "127.0.0.1:0", consoleFlags: consoleFlags{hosts: []string{"console.example"}}})
	cp := start(t, "xds", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0", "--services", "greeter",
		"--metrics-listen", "127.0.0.1:0", "--metrics-host", "cp.example")
	side := startReading(t, true, "register", "--endpoints", s.endpoint, "--name", "side", "--addr", "127.0.0.1:9",
		"--metrics-listen", "127.0.0.1:0", "--metrics-host", "side.example")
	listeners := []struct {
		name, addr, named string
		paths             []string
	}{
		{"serve --metrics-listen", metricsAt(s.stderr), "registry.example", []string{"/metrics", "/healthz", "/livez", "/readyz", "/prometheus/sd", "/ui/", "/ui/api/session"}},
		{"muster console", strings.TrimSuffix(strings.TrimPrefix(consoleURL, "http://"), consolePath), "console.example", []string{"/", "/metrics", "/livez", "/readyz", "/prometheus/sd", "/ui/", "/ui/api/session"}},
		{"muster xds --metrics-listen", metricsAt(cp.stderr), "cp.example", []string{"/metrics", "/healthz", "/livez", "/readyz"}},
		{"muster register --metrics-listen", metricsAt(side.stderr), "side.example", []string{"/metrics", "/livez", "/readyz"}},
	}
	client := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(addr, path, host string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s (Host %s): %v", addr, path, host, err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, l := range listeners {
		for _, path := range l.paths {
			for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:2381", "10.9.9.9"} {
				if code := get(l.addr, path, host); code != http.StatusMisdirectedRequest {
					t.Errorf("%s: GET %s with Host %s: %d, want 421", l.name, path, host, code)
				}
			}
			for _, host := range []string{l.addr, "localhost", l.named} {
				if code := get(l.addr, path, host); code == http.StatusMisdirectedRequest {
					t.Errorf("%s: GET %s with Host %s: 421, want it answered", l.name, path, host)
				}
			}
		}
	}
}
