package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// writeFile writes content to a new file of the test and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// serve's listen URLs other than loopback need TLS and authentication, or
// --insecure-listen-anywhere; every mistake in the TLS flags is a usage
// error naming the flag (checked on the flags alone: the test binds
// nothing beyond loopback).
func TestServeSecureListenFlags(t *testing.T) {
	f, other := etcdtest.GenerateTLS(t), etcdtest.GenerateTLS(t)
	pw := writeFile(t, "root-password", "s3cret\n")
	serverTLS := serveSecurity{client: embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile}}
	withAuth := serverTLS
	withAuth.rootPasswordFile = pw
	withCerts := serverTLS
	withCerts.client.TrustedCAFile, withCerts.client.ClientCertAuth = f.CAFile, true
	peerTLS := withAuth
	peerTLS.peer = embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile}
	peerCerts := peerTLS
	peerCerts.peer.TrustedCAFile, peerCerts.peer.ClientCertAuth = f.CAFile, true
	wrongKey := serverTLS
	wrongKey.client.KeyFile = other.ServerKeyFile
	noCA := serverTLS
	noCA.client.ClientCertAuth = true
	emptyPassword := serverTLS
	emptyPassword.rootPasswordFile = writeFile(t, "empty", "\n")

	const anywhere, loopback, peerLoop = "https://0.0.0.0:23790", "https://127.0.0.1:23790", "http://127.0.0.1:23800"
	for _, tc := range []struct {
		name         string
		client, peer string
		security     serveSecurity
		want         string // in the error; empty: valid
	}{
		{"plain text anywhere", "http://0.0.0.0:23790", peerLoop, serveSecurity{}, "--insecure-listen-anywhere"},
		{"TLS anywhere without auth", anywhere, peerLoop, serverTLS, "turn authentication on with --root-password-file"},
		{"TLS and root password anywhere", anywhere, peerLoop, withAuth, ""},
		{"TLS and client certificates anywhere", anywhere, peerLoop, withCerts, ""},
		{"TLS on loopback without auth", loopback, peerLoop, serverTLS, ""},
		{"https without a certificate", loopback, peerLoop, serveSecurity{}, "https needs --cert-file and --key-file"},
		{"a certificate on http", "http://127.0.0.1:23790", peerLoop, serverTLS, "need an https:// --listen-client-url"},
		{"the key of another certificate", loopback, peerLoop, wrongKey, "--listen-client-url TLS"},
		{"client certificates without a CA", loopback, peerLoop, noCA, "--client-cert-auth needs --trusted-ca-file"},
		{"an empty root password", loopback, peerLoop, emptyPassword, "its first line is empty"},
		{"peer anywhere in plain text", anywhere, "http://0.0.0.0:23800", withAuth, "--peer-client-cert-auth"},
		{"peer anywhere without peer certificates", anywhere, "https://0.0.0.0:23800", peerTLS, "--peer-client-cert-auth"},
		{"peer anywhere with peer certificates", anywhere, "https://0.0.0.0:23800", peerCerts, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := serveOptions{dataDir: t.TempDir(), name: "default", clientURL: tc.client, peerURL: tc.peer, security: tc.security}
			err := o.validate(true)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validate: %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// The command line says the same, as a usage error.
	r := run("serve", "--listen-client-url", anywhere, "--cert-file", f.ServerCertFile, "--key-file", f.ServerKeyFile)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--root-password-file") {
		t.Fatalf("serve with TLS anywhere and no auth: %+v, want a usage error naming --root-password-file", r)
	}
}

// serve with TLS and authentication: the command, serve's own console and
// its xDS control plane log in and work; an anonymous client is refused;
// a restart without the root password fails, naming the flag. With
// --client-cert-auth, the console and xDS present the server's
// certificate and a client without one is refused.
func TestServeTLSAndAuth(t *testing.T) {
	for _, clientCerts := range []bool{false, true} {
		t.Run(map[bool]string{false: "password", true: "password and client certificates"}[clientCerts], func(t *testing.T) {
			f := etcdtest.GenerateTLS(t)
			pw := writeFile(t, "root-password", "s3cret\n")
			urls := freeLoopbackURLs(t, 2)
			o := serveOptions{dataDir: t.TempDir(), name: "test", xdsAddr: "127.0.0.1:0", metricsAddr: "127.0.0.1:0",
				clientURL: strings.Replace(urls[0], "http://", "https://", 1), peerURL: urls[1],
				security: serveSecurity{rootPasswordFile: pw, client: embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile}}}
			tlsFlags := []string{"--cacert", f.CAFile}
			if clientCerts {
				o.security.client.TrustedCAFile, o.security.client.ClientCertAuth = f.CAFile, true
				tlsFlags = append(tlsFlags, "--cert", f.CertFile, "--key", f.KeyFile)
			}
			if err := o.validate(true); err != nil {
				t.Fatal(err)
			}
			s, err := tryServe(t, o)
			if err != nil {
				t.Fatalf("serve did not start: %v", err)
			}

			// A server registers as root, over TLS.
			cfg := etcd.ClientConfig(s.endpoint)
			cfg.TLS, cfg.Username, cfg.Password = f.ClientTLS(), "root", "s3cret"
			if !clientCerts {
				cfg.TLS.Certificates = nil
			}
			root, err := clientv3.New(cfg)
			if err != nil {
				t.Fatalf("root client: %v", err)
			}
			defer root.Close()
			reg, err := etcd.NewRegistrar(root, etcd.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer reg.Close()
			be := testbackend.Start(t)
			register(t, reg, registry.Instance{ID: "greeter-1", Name: "greeter", Addr: be.Addr})

			// The command logs in; without a user it is refused. Its
			// timeout is the test's patience, not the default 5 s: a TLS
			// handshake and etcd's bcrypt check of the password on a
			// loaded 2-core machine took longer.
			args := append([]string{"ls", "greeter", "--endpoints", s.endpoint, "--timeout", "30s"}, tlsFlags...)
			if out := runOK(t, append(args, "--user", "root", "--password-file", pw)...).stdout; !strings.Contains(out, be.Addr) {
				t.Errorf("muster ls as root lists\n%s\nwant %s", out, be.Addr)
			}
			if r := run(args...); r.code == 0 {
				t.Errorf("muster ls without --user succeeded:\n%s", r.stdout)
			}
			anon := cfg
			anon.Username, anon.Password = "", ""
			cli, err := clientv3.New(anon)
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			if _, err := cli.Put(ctx, registry.DefaultPrefix+"/greeter/intruder", "x"); err == nil {
				t.Errorf("an anonymous client wrote into the registry")
			}

			// serve's xDS control plane and console read the registry.
			if got := xdsCallThen(t, xdsAddr(t, s.stderr), "greeter", nil); got != be.Addr {
				t.Errorf("xDS call served by %s, want %s", got, be.Addr)
			}
			m := regexp.MustCompile(`console on (http://\S+/ui/)`).FindStringSubmatch(s.stderr.String())
			if m == nil {
				t.Fatalf("serve's log does not say where the console is:\n%s", s.stderr)
			}
			listed := false
			for ev := range ssetest.Open(ctx, t, m[1]+"api/service/events?name=greeter", nil) {
				if ev.Name == "state" && strings.Contains(ev.Data, be.Addr) {
					listed = true
					break
				}
			}
			if !listed {
				t.Errorf("the console never listed %s: %v", be.Addr, ctx.Err())
			}
			if clientCerts {
				noCert := cfg
				noCert.TLS = f.ClientTLS()
				noCert.TLS.Certificates = nil
				c, err := clientv3.New(noCert)
				if err == nil {
					c.Close()
					t.Errorf("a client without a certificate logged in")
				}
			}
			s.stop(t)

			// The data directory keeps authentication on: a restart
			// without the password fails, naming the flag.
			o.security.rootPasswordFile, o.security.rootPassword = "", ""
			if err := serveFails(t, o); !errors.Is(err, embedetcd.ErrAuth) || !strings.Contains(err.Error(), "--root-password-file") {
				t.Errorf("serve without the root password: %v, want ErrAuth naming --root-password-file", err)
			}
		})
	}
}
