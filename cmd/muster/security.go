package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/reload"
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
		get, err := g.clientCertificate()
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = get
	}
	return cfg, nil
}

// clientCertificate returns the tls.Config.GetClientCertificate of the
// etcd client: the certificate of --cert and --key, read again when one of
// the files changed, so that a rotated certificate is presented by the
// next connection without a restart (each reading logged; files that do
// not load are logged at error level, and the last good certificate is
// kept until they change again).
func (g *globalOptions) clientCertificate() (func(*tls.CertificateRequestInfo) (*tls.Certificate, error), error) {
	certFile, keyFile := g.cert, g.key
	src, err := reload.New(func() (tls.Certificate, error) { return tls.LoadX509KeyPair(certFile, keyFile) }, 0, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--cert %s, --key %s: %w", certFile, keyFile, err)
	}
	log := g.log.logger(g.log.out, slog.LevelInfo)
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		cert, changed, err := src.Get(time.Now())
		if err != nil {
			log.Error("etcd client certificate files changed but do not load; new connections keep presenting the last good one",
				"cert", certFile, "key", keyFile, "error", err)
		}
		if changed {
			attrs := []any{"cert", certFile}
			if cert.Leaf != nil {
				attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "issuer", cert.Leaf.Issuer.String(), "not_after", cert.Leaf.NotAfter)
			}
			log.Info("etcd client certificate read again; new connections present it", attrs...)
		}
		return &cert, nil
	}, nil
}

// authenticateMethod is the etcd RPC by which a client logs in: the etcd
// client calls it at start and whenever etcd refuses its token (expired,
// lost in a member's restart, or older than a change of users or roles).
const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// passwordFromFile returns the gRPC interceptor through which the etcd
// client logs in with the password of --password-file as the file is at
// that moment: the file is looked at again at each login, so that a
// password changed in etcd and in the file is used from the next login
// without a restart (each reading logged; a file that no longer holds a
// password is logged at error level, and the last good password kept).
// The etcd client keeps the password it was given; the interceptor puts
// the file's into the login request instead.
func (g *globalOptions) passwordFromFile() (grpc.UnaryClientInterceptor, error) {
	name := g.passwordFile
	src, err := reload.New(func() (string, error) { return readPasswordFile("--password-file", name) }, 0, name)
	if err != nil {
		return nil, err
	}
	log := g.log.logger(g.log.out, slog.LevelInfo)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*pb.AuthenticateRequest); ok && method == authenticateMethod {
			password, changed, err := src.Get(time.Now())
			if err != nil {
				log.Error("etcd password file changed but holds no password; logging in with the last good one", "file", name, "error", err)
			}
			if changed {
				log.Info("etcd password file read again; the next logins use it", "file", name, "user", r.Name)
			}
			req = &pb.AuthenticateRequest{Name: r.Name, Password: password}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}, nil
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
