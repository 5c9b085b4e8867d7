package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Something that is not etcd at the endpoint, or TLS on one side only,
// gives a hint instead of gRPC's "http2: frame too large".
func TestEndpointNotEtcdHints(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	plain := httptest.NewServer(handler)
	defer plain.Close()
	tlsServer := httptest.NewUnstartedServer(handler)
	tlsServer.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes
	tlsServer.StartTLS()
	defer tlsServer.Close()
	for _, c := range []struct{ name, endpoint, hint string }{
		{"plain http server", plain.URL, "what answers there is not etcd's client port, or it serves TLS"},
		{"TLS server, http endpoint", strings.Replace(tlsServer.URL, "https://", "http://", 1), "if it serves TLS, use an https:// endpoint"},
		{"TLS server without HTTP/2", tlsServer.URL, "what answers there is not etcd: it does not serve gRPC"},
		{"plain server, https endpoint", strings.Replace(plain.URL, "http://", "https://", 1), "what answers there does not serve TLS: use an http:// endpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := run("ls", "--endpoints", c.endpoint, "--timeout", "1s")
			if r.code != exitFailure || !strings.Contains(r.stderr, c.hint) {
				t.Fatalf("ls --endpoints %s: exit %d, stderr %q; want exit 1 and the hint %q", c.endpoint, r.code, r.stderr, c.hint)
			}
		})
	}
}
