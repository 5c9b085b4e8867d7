package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ClientCommonName is the common name of the client certificates made by
// GenerateTLS. With auth enabled, etcd takes it as the user name of a
// request that carries no token: such requests are refused until a test
// creates a user of that name.
const ClientCommonName = "etcdtest-client"

// certValidity is how long generated certificates are valid; they start an
// hour in the past, so clock skew never makes them "not yet valid".
const certValidity = 24 * time.Hour

// TLSFiles is a certificate authority and two certificates it signed, as
// PEM files in a test's temporary directory: a server certificate for
// 127.0.0.1, ::1 and localhost, and a client certificate (common name
// ClientCommonName). Create one with GenerateTLS; a cluster started
// WithTLS has its own (Cluster.TLS).
type TLSFiles struct {
	// CAFile is the CA certificate (etcdctl --cacert).
	CAFile string
	// CertFile is the client certificate (etcdctl --cert).
	CertFile string
	// KeyFile is the client certificate's private key (etcdctl --key).
	KeyFile string
	// ServerCertFile and ServerKeyFile are the server certificate and its
	// key.
	ServerCertFile string
	ServerKeyFile  string

	pool   *x509.CertPool
	client tls.Certificate
	// ca and caKey sign the certificates of IssueClient.
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// ClientTLS returns a new client configuration that trusts only the CA
// and presents the client certificate. The caller may modify it.
func (f *TLSFiles) ClientTLS() *tls.Config {
	return &tls.Config{
		RootCAs:      f.pool,
		Certificates: []tls.Certificate{f.client},
		MinVersion:   tls.VersionTLS12,
	}
}

// GenerateTLS creates a new CA, a server certificate and a client
// certificate signed by it (ECDSA P-256, valid for a day) in a new
// temporary directory of t. Each call makes an unrelated CA, so the CA of
// one call is the wrong CA for the certificates of another. It fails the
// test on error.
func GenerateTLS(t testing.TB) *TLSFiles {
	t.Helper()
	f, err := generateTLS(t.TempDir())
	if err != nil {
		t.Fatalf("etcdtest: generate TLS certificates: %v", err)
	}
	return f
}

// IssueClient issues another client certificate signed by f's CA for
// commonName, valid from notBefore until notAfter (either may be in the
// past: an expired or a not yet valid certificate), and returns its PEM
// files, in a new temporary directory of t. It fails the test on error.
func (f *TLSFiles) IssueClient(t testing.TB, commonName string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("etcdtest: issue a client certificate: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	if _, err := issue(tmpl, f.ca, f.caKey, certFile, keyFile); err != nil {
		t.Fatalf("etcdtest: issue a client certificate: %v", err)
	}
	return certFile, keyFile
}

func generateTLS(dir string) (*TLSFiles, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcdtest CA " + filepath.Base(dir)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	f := &TLSFiles{
		CAFile:         filepath.Join(dir, "ca.pem"),
		CertFile:       filepath.Join(dir, "client.pem"),
		KeyFile:        filepath.Join(dir, "client-key.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		pool:           x509.NewCertPool(),
		ca:             ca,
		caKey:          caKey,
	}
	f.pool.AddCert(ca)
	if err := writePEM(f.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	// The server certificate also allows client use: etcd may present it
	// when it connects to itself.
	server := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "etcdtest server"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	if _, err := issue(server, ca, caKey, f.ServerCertFile, f.ServerKeyFile); err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: ClientCommonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if f.client, err = issue(client, ca, caKey, f.CertFile, f.KeyFile); err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return f, nil
}

// issue creates a key and a certificate from tmpl signed by ca, writes
// both as PEM files and returns them as a tls.Certificate.
func issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return tls.Certificate{}, err
	}
	if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
