package xds

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/musterhq/muster/internal/admission"
)

// WithTLS makes Serve serve ADS over TLS with cfg, used as given (a
// certificate in cfg.Certificates is never re-read; see WithTLSFiles for
// files that are). Without WithTLS or WithTLSFiles, Serve serves plaintext.
// A nil cfg, or one without a certificate, is an error of New, and so is
// giving both WithTLS and WithTLSFiles. Register does not use it: a
// caller's own grpc.Server has its own credentials.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil || (len(cfg.Certificates) == 0 && cfg.GetCertificate == nil && cfg.GetConfigForClient == nil) {
			o.invalid("WithTLS: no server certificate")
			return
		}
		o.tlsConfig = cfg
	}
}

// WithTLSFiles makes Serve serve ADS over TLS with the certificate and key
// in PEM files certFile and keyFile, and, if clientCAFile is not empty,
// require client certificates signed by the CA in that file (as
// ServerTLS). New reads the files (an error reading them is an error of
// New), and they are read again when they change, so certificates rotate
// without a restart: each TLS handshake compares the files' size and
// modification time with those of the last read (one stat per file) and
// reloads them on a change. New connections get the new certificate;
// established streams keep theirs. A change that does not load (a
// missing or broken file, a key that does not match the certificate) keeps
// the last good files in use; it is logged as an error and counted
// (Stats.TLSReloadErrors) once per change, and the files are read again at
// their next change. Empty certFile or keyFile is an error of New, and so
// is giving both WithTLS and WithTLSFiles. Register does not use it.
func WithTLSFiles(certFile, keyFile, clientCAFile string) Option {
	return func(o *options) {
		if certFile == "" || keyFile == "" {
			o.invalid("WithTLSFiles: want a certificate file and a key file")
			return
		}
		o.tlsFiles = &tlsFiles{cert: certFile, key: keyFile, clientCA: clientCAFile}
	}
}

// grpcCreds returns the server option of the TLS options, or nil for
// plaintext.
func (o *options) grpcCreds(st *stats) (grpc.ServerOption, error) {
	switch {
	case o.tlsConfig != nil && o.tlsFiles != nil:
		return nil, fmt.Errorf("xds: WithTLS and WithTLSFiles: give one of them")
	case o.tlsConfig != nil:
		return grpc.Creds(admission.Credentials(credentials.NewTLS(o.tlsConfig))), nil
	case o.tlsFiles != nil:
		r, err := newCertReloader(*o.tlsFiles, o.log, st)
		if err != nil {
			return nil, err
		}
		return grpc.Creds(admission.Credentials(credentials.NewTLS(&tls.Config{
			MinVersion:         tls.VersionTLS12,
			GetConfigForClient: r.configForClient,
		}))), nil
	}
	return nil, nil
}

// tls reports whether Serve serves TLS (WithTLS or WithTLSFiles): its
// connections are then admitted in two steps, their handshake first
// (admission.NewTLSListener).
func (o *options) tls() bool { return o.tlsConfig != nil || o.tlsFiles != nil }

// ServerTLS returns a TLS configuration for the xDS listener from PEM
// files: the server's certificate and key, and, if clientCAFile is not
// empty, the CA whose signature a client's certificate must carry (clients
// without one are refused at the handshake). TLS 1.2 is the minimum. The
// files are read once; WithTLSFiles reads them again when they change.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	return tlsFiles{cert: certFile, key: keyFile, clientCA: clientCAFile}.load()
}

// tlsFiles names the PEM files of the xDS listener's TLS.
type tlsFiles struct {
	cert, key, clientCA string
}

// load reads the files into a server configuration.
func (f tlsFiles) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("xds: server certificate %s, key %s: %w", f.cert, f.key, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.clientCA == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(f.clientCA)
	if err != nil {
		return nil, fmt.Errorf("xds: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("xds: client CA %s: no PEM certificate in the file", f.clientCA)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return cfg, nil
}
