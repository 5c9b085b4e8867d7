package main

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// endpointForms is what every URL flag of muster accepts.
const endpointForms = "want http://host:port, https://host:port or host:port (meaning http://host:port)"

// parseEndpoint checks the URL raw, given to flag, and returns it as
// scheme://host:port. It accepts the same forms on every flag: http and
// https URLs with a host and a port and nothing else, and host:port,
// meaning http://host:port. The error names the mistake.
func parseEndpoint(flag, raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", usageErrorf("%s %q: %s", flag, raw, endpointForms)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", usageErrorf("%s %q: unknown scheme %q; %s", flag, raw, u.Scheme, endpointForms)
	case u.User != nil:
		return "", usageErrorf("%s %q: no user in the URL; give it with --user", flag, raw)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return "", usageErrorf("%s %q: a path, query or fragment is not allowed; %s", flag, raw, endpointForms)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", usageErrorf("%s %q: no port; %s", flag, raw, endpointForms)
	}
	if host == "" {
		return "", usageErrorf("%s %q: no host; %s", flag, raw, endpointForms)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", usageErrorf("%s %q: port %q is not a number 1..65535", flag, raw, port)
	}
	return u.Scheme + "://" + net.JoinHostPort(host, port), nil
}

// connectionHint returns what to check after a connection failure
// described by cause, when it says that what answers at the endpoint is not
// etcd, or speaks TLS when plain was used (or the reverse), or "".
func connectionHint(cause string) string {
	switch {
	case strings.Contains(cause, "frame too large"), strings.Contains(cause, "server preface") && !strings.Contains(cause, "EOF"):
		return "what answers there is not etcd's client port, or it serves TLS: check the port (etcd's is usually 2379), or use an https:// endpoint"
	case strings.Contains(cause, "no application protocol"):
		return "what answers there is not etcd: it does not serve gRPC (HTTP/2); check the port (etcd's is usually 2379)"
	case strings.Contains(cause, "first record does not look like a TLS handshake"):
		return "what answers there does not serve TLS: use an http:// endpoint, or check the port"
	}
	return ""
}

// validateEndpoints checks and normalises g.endpoints; empty entries are
// dropped.
func (g *globalOptions) validateEndpoints() error {
	var eps []string
	for _, ep := range g.endpoints {
		if strings.TrimSpace(ep) == "" {
			continue
		}
		u, err := parseEndpoint("--endpoints", ep)
		if err != nil {
			return err
		}
		eps = append(eps, u)
	}
	if len(eps) == 0 {
		return usageErrorf("--endpoints: need at least one etcd endpoint")
	}
	g.endpoints = eps
	return nil
}

// loopbackURL reports whether the host of u (a listen URL that
// embedetcd.ParseURL accepted) is a loopback address or localhost, so that
// only this machine can reach it.
func loopbackURL(u string) bool {
	parsed, err := url.Parse(u)
	if err != nil {
		return false
	}
	host := parsed.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
