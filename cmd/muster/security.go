package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// passwordEnv is the environment variable that holds the password of
// --user when no flag gives it, as etcdctl's ETCDCTL_PASSWORD does.
const passwordEnv = "MUSTER_PASSWORD"

// validateSecurity checks the TLS and authentication flags; its errors are
// usage errors. It splits --user name:password into user and password, and
// reads the password from --password-file or $MUSTER_PASSWORD when no flag
// gives it.
func (g *globalOptions) validateSecurity() error {
	if (g.cert == "") != (g.key == "") {
		return usageErrorf("--cert and --key go together: give both or neither")
	}
	if (g.cacert != "" || g.cert != "") && !g.clustered {
		for _, ep := range g.endpoints {
			if strings.HasPrefix(ep, "http://") {
				return usageErrorf("--cacert, --cert and --key need https:// endpoints; %s is plain http", ep)
			}
		}
	}
	if g.user == "" {
		switch {
		case g.password != "":
			return usageErrorf("--password needs --user")
		case g.passwordFile != "":
			return usageErrorf("--password-file needs --user")
		}
		return nil
	}
	if name, pass, ok := strings.Cut(g.user, ":"); ok {
		if g.password != "" || g.passwordFile != "" {
			return usageErrorf("--user %s: give the password once: after the colon, with --password or with --password-file", name)
		}
		g.user, g.password = name, pass
	}
	if g.user == "" {
		return usageErrorf("--user: the user name is empty")
	}
	if g.passwordFile != "" {
		if g.password != "" {
			return usageErrorf("--password and --password-file: give one")
		}
		var err error
		if g.password, err = readPasswordFile("--password-file", g.passwordFile); err != nil {
			return err
		}
	}
	if g.password == "" {
		g.password = os.Getenv(passwordEnv)
	}
	if g.password == "" {
		return usageErrorf("--user %s: no password; use --password-file, $%s, --user %s:PASSWORD or --password", g.user, passwordEnv, g.user)
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

// readPasswordFile returns the first line of the file name, given to flag:
// a password, which must not be empty. Its errors are usage errors.
func readPasswordFile(flag, name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", usageErrorf("%s: %v", flag, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSuffix(line, "\r"); line == "" {
		return "", usageErrorf("%s %s: its first line is empty", flag, name)
	}
	return line, nil
}
