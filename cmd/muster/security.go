package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// validateSecurity checks the TLS and authentication flags; its errors are
// usage errors. It splits --user name:password into user and password.
func (g *globalOptions) validateSecurity() error {
	if (g.cert == "") != (g.key == "") {
		return usageErrorf("--cert and --key go together: give both or neither")
	}
	if g.cacert != "" || g.cert != "" {
		for _, ep := range g.endpoints {
			if strings.HasPrefix(ep, "http://") {
				return usageErrorf("--cacert, --cert and --key need https:// endpoints; %s is plain http", ep)
			}
		}
	}
	if g.user == "" {
		if g.password != "" {
			return usageErrorf("--password needs --user")
		}
		return nil
	}
	if name, pass, ok := strings.Cut(g.user, ":"); ok {
		if g.password != "" {
			return usageErrorf("--user %s: give the password either after the colon or with --password, not both", name)
		}
		g.user, g.password = name, pass
	}
	if g.user == "" {
		return usageErrorf("--user: the user name is empty")
	}
	if g.password == "" {
		return usageErrorf("--user %s: no password; use --user %s:PASSWORD or --password", g.user, g.user)
	}
	return nil
}

// tlsConfig returns the TLS configuration the flags ask for, or nil when
// they ask for none (https:// endpoints are then verified with the
// system's CAs). It reads the files.
func (g *globalOptions) tlsConfig() (*tls.Config, error) {
	if g.cacert == "" && g.cert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.cacert != "" {
		pem, err := os.ReadFile(g.cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in the file", g.cacert)
		}
		cfg.RootCAs = pool
	}
	if g.cert != "" {
		cert, err := tls.LoadX509KeyPair(g.cert, g.key)
		if err != nil {
			return nil, fmt.Errorf("--cert %s, --key %s: %w", g.cert, g.key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
