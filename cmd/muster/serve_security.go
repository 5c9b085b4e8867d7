package main

import (
	"strings"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/registry/etcd"
)

// serveSecurity holds serve's flags that secure its embedded etcd: TLS for
// the client and peer listeners, named as etcd's own flags are, and etcd
// authentication with the user root.
type serveSecurity struct {
	client, peer embedetcd.TLS
	// rootPasswordFile holds root's password on its first line; empty:
	// authentication off.
	rootPasswordFile string
	// rootPassword is read from rootPasswordFile by validate.
	rootPassword string
}

func (s *serveSecurity) addFlags(f *pflag.FlagSet) {
	f.StringVar(&s.client.CertFile, "cert-file", "", "TLS certificate (PEM) the embedded etcd serves clients with; needs an https:// --listen-client-url and --key-file")
	f.StringVar(&s.client.KeyFile, "key-file", "", "private key (PEM) of --cert-file")
	f.StringVar(&s.client.TrustedCAFile, "trusted-ca-file", "", "CA bundle (PEM) that signs the client certificates --client-cert-auth requires")
	f.BoolVar(&s.client.ClientCertAuth, "client-cert-auth", false, "require of every client a certificate signed by --trusted-ca-file")
	f.StringVar(&s.client.ClientCertFile, "client-cert-file", "", "certificate this process's own console and xDS present to its etcd under --client-cert-auth (default: --cert-file, which must then allow client authentication)")
	f.StringVar(&s.client.ClientKeyFile, "client-key-file", "", "private key (PEM) of --client-cert-file")
	f.StringVar(&s.peer.CertFile, "peer-cert-file", "", "TLS certificate (PEM) for the peer listener; needs an https:// --listen-peer-url and --peer-key-file")
	f.StringVar(&s.peer.KeyFile, "peer-key-file", "", "private key (PEM) of --peer-cert-file")
	f.StringVar(&s.peer.TrustedCAFile, "peer-trusted-ca-file", "", "CA bundle (PEM) that signs the peer certificates --peer-client-cert-auth requires")
	f.BoolVar(&s.peer.ClientCertAuth, "peer-client-cert-auth", false, "require of every peer a certificate signed by --peer-trusted-ca-file")
	f.StringVar(&s.rootPasswordFile, "root-password-file", "", "turn etcd authentication on, with the user root and the password on this file's first line "+
		"(set on the first start, checked on every later one); clients then log in with --user root")
}

// clientTLS returns the TLS of the client listener, nil for plain text.
func (s *serveSecurity) clientTLS() *embedetcd.TLS {
	if s.client == (embedetcd.TLS{}) {
		return nil
	}
	return &s.client
}

// peerTLS returns the TLS of the peer listener, nil for plain text.
func (s *serveSecurity) peerTLS() *embedetcd.TLS {
	if s.peer == (embedetcd.TLS{}) {
		return nil
	}
	return &s.peer
}

// validate checks the flags against the listen URLs (normalised by
// parseEndpoint) and reads the root password. Unless insecureAnywhere, a
// client URL other than loopback needs TLS and authentication (a root
// password or client certificates), a peer URL other than loopback TLS
// with peer certificates.
func (s *serveSecurity) validate(clientURL, peerURL string, insecureAnywhere bool) error {
	for _, l := range []struct {
		listen, url, prefix string
		tls                 *embedetcd.TLS
	}{
		{"--listen-client-url", clientURL, "--", s.clientTLS()},
		{"--listen-peer-url", peerURL, "--peer-", s.peerTLS()},
	} {
		https := strings.HasPrefix(l.url, "https://")
		switch {
		case l.tls == nil && https:
			return usageErrorf("%s %s: https needs %scert-file and %skey-file", l.listen, l.url, l.prefix, l.prefix)
		case l.tls != nil && !https:
			return usageErrorf("%scert-file, %skey-file and the other %sTLS flags need an https:// %s; %s is plain http",
				l.prefix, l.prefix, strings.TrimPrefix(l.prefix, "--"), l.listen, l.url)
		case l.tls == nil:
			continue
		case l.tls.CertFile == "" || l.tls.KeyFile == "":
			return usageErrorf("%scert-file and %skey-file go together: give both", l.prefix, l.prefix)
		case l.tls.ClientCertAuth && l.tls.TrustedCAFile == "":
			return usageErrorf("%sclient-cert-auth needs %strusted-ca-file, the CA that signs the client certificates", l.prefix, l.prefix)
		}
		if err := l.tls.Validate(); err != nil {
			return usageErrorf("%s TLS: %v", l.listen, err)
		}
	}
	if s.rootPasswordFile != "" {
		var err error
		if s.rootPassword, err = readPasswordFile("--root-password-file", s.rootPasswordFile); err != nil {
			return err
		}
	}
	if insecureAnywhere {
		return nil
	}
	if !loopbackURL(clientURL) {
		switch {
		case s.clientTLS() == nil:
			return usageErrorf("--listen-client-url %s: other hosts would reach the embedded etcd in plain text, where anyone can "+
				"write, delete and lock out the registry; listen on loopback (127.0.0.1, [::1], localhost), or serve TLS "+
				"(an https:// URL with --cert-file and --key-file) with authentication (--root-password-file, or "+
				"--client-cert-auth), or, on a network you trust, say so with --insecure-listen-anywhere", clientURL)
		case s.rootPassword == "" && !s.client.ClientCertAuth:
			return usageErrorf("--listen-client-url %s: other hosts would reach the embedded etcd with no authentication, "+
				"so anyone can write, delete and lock out the registry; turn authentication on with --root-password-file "+
				"(or --client-cert-auth), listen on loopback, or, on a network you trust, say so with --insecure-listen-anywhere", clientURL)
		}
	}
	if !loopbackURL(peerURL) && (s.peerTLS() == nil || !s.peer.ClientCertAuth) {
		return usageErrorf("--listen-peer-url %s: other hosts would reach the embedded etcd's peer port without peer "+
			"certificates; a single node needs no peer reachable from elsewhere: listen on loopback, or serve TLS with "+
			"--peer-cert-file, --peer-key-file, --peer-trusted-ca-file and --peer-client-cert-auth, or, on a network you "+
			"trust, say so with --insecure-listen-anywhere", peerURL)
	}
	return nil
}

// selfClient returns the etcd client configuration with which serve's own
// console and xDS control plane reach srv: over TLS if it serves TLS, as
// root if authentication is on.
func (s *serveSecurity) selfClient(srv *embedetcd.Server) clientv3.Config {
	cfg := etcd.ClientConfig(srv.Endpoint())
	cfg.TLS = srv.ClientTLS()
	if s.rootPassword != "" {
		cfg.Username, cfg.Password = embedetcd.RootUser, s.rootPassword
	}
	return cfg
}
