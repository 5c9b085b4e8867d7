package embedetcd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

const waitTimeout = 20 * time.Second

// freeURLs returns two URLs on loopback ports that were free a moment
// ago: a client URL of scheme and a plain-text peer URL.
func freeURLs(t *testing.T, scheme string) (client, peer string) {
	t.Helper()
	var urls []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserve a port: %v", err)
		}
		defer ln.Close()
		urls = append(urls, scheme+"://"+ln.Addr().String())
		scheme = "http"
	}
	return urls[0], urls[1]
}

// start starts a server as cfg says, on free ports of scheme, stopped at
// the end of the test.
func start(t *testing.T, cfg embedetcd.Config, scheme string) *embedetcd.Server {
	t.Helper()
	cfg.ClientURL, cfg.PeerURL = freeURLs(t, scheme)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := embedetcd.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// client connects to s with tlsCfg, as user (none when empty).
func client(t *testing.T, s *embedetcd.Server, tlsCfg *tls.Config, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}, TLS: tlsCfg, DialTimeout: 5 * time.Second,
		Username: user, Password: password, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("client of %s as %q: %v", s.Endpoint(), user, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func put(cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := cli.Put(ctx, "k", "v")
	return err
}

// With TLS and a root password the server turns authentication on: the
// process's own client (SelfTLS, root) writes, an anonymous client with a
// trusted certificate is refused, a plain-text client gets nowhere; a
// restart keeps authentication on and needs the same password.
func TestTLSAndRootPassword(t *testing.T) {
	f := etcdtest.GenerateTLS(t)
	dir := t.TempDir()
	cfg := embedetcd.Config{Dir: dir, RootPassword: "s3cret",
		ClientTLS: &embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile}}
	s := start(t, cfg, "https")
	if !strings.HasPrefix(s.Endpoint(), "https://") {
		t.Fatalf("endpoint %s, want https", s.Endpoint())
	}
	if err := put(client(t, s, s.ClientTLS(), embedetcd.RootUser, "s3cret")); err != nil {
		t.Fatalf("put as root over SelfTLS: %v", err)
	}
	if err := put(client(t, s, f.ClientTLS(), "", "")); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("anonymous put: %v, want %v", err, rpctypes.ErrUserEmpty)
	}
	if _, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}, TLS: f.ClientTLS(), DialTimeout: 5 * time.Second,
		Username: embedetcd.RootUser, Password: "guess", Logger: zap.NewNop()}); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("root with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, password string }{{"no password", ""}, {"another password", "other"}} {
		t.Run("restart with "+tc.name, func(t *testing.T) {
			c := cfg
			c.RootPassword = tc.password
			c.ClientURL, c.PeerURL = freeURLs(t, "https")
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			s, err := embedetcd.Start(ctx, c)
			if err == nil {
				_ = s.Close()
			}
			if !errors.Is(err, embedetcd.ErrAuth) {
				t.Fatalf("start: %v, want ErrAuth", err)
			}
		})
	}
	s = start(t, cfg, "https")
	if err := put(client(t, s, s.ClientTLS(), embedetcd.RootUser, "s3cret")); err != nil {
		t.Fatalf("put as root after the restart: %v", err)
	}
}

// With client certificates required, the process's own client presents
// the server's certificate; a client without one fails the handshake.
func TestClientCertAuth(t *testing.T) {
	f := etcdtest.GenerateTLS(t)
	s := start(t, embedetcd.Config{Dir: t.TempDir(), ClientTLS: &embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile,
		TrustedCAFile: f.CAFile, ClientCertAuth: true}}, "https")
	if err := put(client(t, s, s.ClientTLS(), "", "")); err != nil {
		t.Fatalf("put over SelfTLS: %v", err)
	}
	noCert := f.ClientTLS()
	noCert.Certificates = nil
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := client(t, s, noCert, "", "").Put(ctx, "k", "v"); err == nil {
		t.Fatal("a client without a certificate wrote")
	}
}

// The process's own client accepts only the certificate the server was
// given: another server with a certificate from another CA is refused.
func TestSelfTLSPinsTheCertificate(t *testing.T) {
	f, other := etcdtest.GenerateTLS(t), etcdtest.GenerateTLS(t)
	s := start(t, embedetcd.Config{Dir: t.TempDir(), ClientTLS: &embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile}}, "https")
	wrong := (&embedetcd.TLS{CertFile: other.ServerCertFile, KeyFile: other.ServerKeyFile}).SelfTLS()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := client(t, s, wrong, "", "").Put(ctx, "k", "v"); err == nil {
		t.Fatal("a client pinned to another certificate wrote")
	}
}

// Bad TLS settings are refused before etcd starts, naming the mistake.
func TestTLSConfigErrors(t *testing.T) {
	f := etcdtest.GenerateTLS(t)
	good := &embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile}
	for _, tc := range []struct {
		name   string
		scheme string
		tls    *embedetcd.TLS
		want   string
	}{
		{"https without TLS", "https", nil, "https needs a TLS certificate"},
		{"TLS on http", "http", good, "want an https:// URL"},
		{"no key", "https", &embedetcd.TLS{CertFile: f.ServerCertFile}, "certificate file and a key file"},
		{"key of another certificate", "https", &embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.KeyFile}, "private key does not match"},
		{"client auth without CA", "https", &embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile, ClientCertAuth: true}, "needs a trusted CA file"},
		{"CA not PEM", "https", &embedetcd.TLS{CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile, TrustedCAFile: "security_test.go"}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := freeURLs(t, tc.scheme)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			s, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), ClientURL: c, PeerURL: p, ClientTLS: tc.tls})
			if err == nil {
				_ = s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
