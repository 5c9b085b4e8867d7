package xds

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithTLS makes Serve serve ADS over TLS with cfg (see ServerTLS). Without
// it, Serve serves plaintext. A nil cfg, or one without a certificate, is
// an error of New. Register does not use it: a caller's own grpc.Server
// has its own credentials.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil || (len(cfg.Certificates) == 0 && cfg.GetCertificate == nil && cfg.GetConfigForClient == nil) {
			o.invalid("WithTLS: no server certificate")
			return
		}
		o.grpcOpts = append(o.grpcOpts, grpc.Creds(credentials.NewTLS(cfg)))
	}
}

// ServerTLS returns a TLS configuration for the xDS listener from PEM
// files: the server's certificate and key, and, if clientCAFile is not
// empty, the CA whose signature a client's certificate must carry (clients
// without one are refused at the handshake). TLS 1.2 is the minimum. The
// files are read once.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("xds: server certificate %s, key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("xds: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("xds: client CA %s: no PEM certificate in the file", clientCAFile)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return cfg, nil
}
