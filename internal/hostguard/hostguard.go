// Package hostguard refuses the HTTP requests whose Host header names a
// host a listener does not answer to, against DNS rebinding: a page of
// another site whose name an attacker rebinds to a listener's address
// sends that name as its Host, and is refused, on every path of the
// listener (the console, /metrics, /healthz, /prometheus/sd alike).
//
// A Guard answers to this machine's loopback names (localhost and every
// loopback address), to the listener's own IP address when it listens on
// one (not on every address), and to the hosts it is given: the names
// users, proxies and Prometheus reach the listener by.
package hostguard

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// Guard decides which Host headers a listener answers to. It is safe for
// concurrent use.
type Guard struct {
	hosts []string // lower case, without brackets
}

// New returns the Guard of a listener on addr (host:port; empty for a
// handler whose listener is not known) that also answers to hosts. A host
// that is empty or holds a '/' or a space is an error naming it.
func New(addr string, hosts ...string) (*Guard, error) {
	g := &Guard{}
	for _, h := range hosts {
		n := normal(h)
		if n == "" || strings.ContainsAny(n, "/ ") {
			return nil, fmt.Errorf("%q is not a host name or an IP address", h)
		}
		g.hosts = append(g.hosts, n)
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			g.hosts = append(g.hosts, normal(host))
		}
	}
	return g, nil
}

// normal is h as hosts are compared: lower case, without brackets.
func normal(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

// Allowed reports whether the listener answers to host, a Host header: a
// name or an IP address, with or without a port.
func (g *Guard) Allowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = normal(host)
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return slices.Contains(g.hosts, host)
}

// Handler returns next behind g: a request for a host g does not answer to
// gets 421 Misdirected Request, saying that what (such as "this console")
// does not answer to it and how to add it (such as "--console-host").
func (g *Guard) Handler(what, howToAdd string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.Allowed(r.Host) {
			http.Error(w, fmt.Sprintf("%s does not answer to host %.64q; name it with %s", what, r.Host, howToAdd),
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
