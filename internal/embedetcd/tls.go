package embedetcd

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// TLS secures a listener of the server, as etcd's flags of the same names
// do (--cert-file, --key-file, --trusted-ca-file, --client-cert-auth,
// --client-cert-file, --client-key-file, and their --peer- forms). The
// files are read again on every handshake, so certificates rotate without
// a restart.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and its key, in
	// PEM. Required.
	CertFile, KeyFile string
	// TrustedCAFile holds the CAs that sign client certificates.
	// Required with ClientCertAuth.
	TrustedCAFile string
	// ClientCertAuth requires every client to present a certificate
	// signed by a CA of TrustedCAFile.
	ClientCertAuth bool
	// ClientCertFile and ClientKeyFile are the certificate that clients in
	// this process present (see SelfTLS); CertFile and KeyFile when
	// empty, whose certificate must then allow client authentication.
	ClientCertFile, ClientKeyFile string
}

// Validate checks that the files go together and can be loaded, so that a
// mistake is named before etcd starts.
func (t *TLS) Validate() error {
	if t.CertFile == "" || t.KeyFile == "" {
		return errors.New("a certificate file and a key file are both required")
	}
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		return fmt.Errorf("certificate %s, key %s: %w", t.CertFile, t.KeyFile, err)
	}
	if t.ClientCertAuth && t.TrustedCAFile == "" {
		return errors.New("client certificate authentication needs a trusted CA file")
	}
	if t.TrustedCAFile != "" {
		b, err := os.ReadFile(t.TrustedCAFile)
		if err != nil {
			return fmt.Errorf("trusted CA file: %w", err)
		}
		if block, _ := pem.Decode(b); block == nil {
			return fmt.Errorf("trusted CA file %s: no PEM certificate in it", t.TrustedCAFile)
		}
	}
	if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
		return errors.New("a client certificate file and a client key file go together")
	}
	if t.ClientCertFile != "" {
		if _, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile); err != nil {
			return fmt.Errorf("client certificate %s, key %s: %w", t.ClientCertFile, t.ClientKeyFile, err)
		}
	}
	return nil
}

// info is t as etcd's configuration.
func (t *TLS) info() transport.TLSInfo {
	return transport.TLSInfo{
		CertFile:       t.CertFile,
		KeyFile:        t.KeyFile,
		TrustedCAFile:  t.TrustedCAFile,
		ClientCertAuth: t.ClientCertAuth,
		ClientCertFile: t.ClientCertFile,
		ClientKeyFile:  t.ClientKeyFile,
	}
}

// SelfTLS returns the TLS configuration for a client in this process to
// reach a server that t secures. The server is this very process, so the
// client accepts exactly the certificate in CertFile, whatever names it
// carries (a server listening on 0.0.0.0 is reached at 127.0.0.1, which
// the certificate need not name), and presents ClientCertFile, or
// CertFile, when the server asks for a certificate.
func (t *TLS) SelfTLS() *tls.Config {
	certFile, keyFile := t.CertFile, t.KeyFile
	if t.ClientCertFile != "" {
		certFile, keyFile = t.ClientCertFile, t.ClientKeyFile
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is VerifyConnection's: the peer must present
		// the certificate this process serves.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			want, err := firstCertificate(t.CertFile)
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return fmt.Errorf("embedetcd: the server's certificate is not the one in %s", t.CertFile)
			}
			return nil
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("embedetcd: client certificate: %w", err)
			}
			return &c, nil
		},
	}
}

// firstCertificate returns the DER bytes of the first certificate in the
// PEM file name.
func firstCertificate(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: %w", err)
	}
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return nil, fmt.Errorf("embedetcd: no certificate in %s", name)
		}
		if block.Type == "CERTIFICATE" {
			return block.Bytes, nil
		}
	}
}
