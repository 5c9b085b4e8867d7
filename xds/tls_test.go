package xds_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/xds"
)

// tlsBootstrap is a gRPC xDS bootstrap with tls channel credentials (gRFC
// A65, file names), as grpc-go v1.85 reads it.
func tlsBootstrap(addr, caFile, certFile, keyFile string) string {
	return fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q,
                   "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q, "certificate_file": %q, "private_key_file": %q}}],
                   "server_features": ["xds_v3", "ignore_resource_deletion"]}],
  "node": {"id": "tls-client"}
}`, addr, caFile, certFile, keyFile)
}

// With WithTLS(ServerTLS(cert, key, clientCA)), a grpc-go xDS client with
// tls channel credentials and a certificate of the client CA is served; a
// client without a certificate, with one of another CA, or in plaintext
// gets nothing.
func TestTLS(t *testing.T) {
	f, other := etcdtest.GenerateTLS(t), etcdtest.GenerateTLS(t)
	cfg, err := xds.ServerTLS(f.ServerCertFile, f.ServerKeyFile, f.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, xds.WithServices("greeter"), xds.WithTLS(cfg))
	a := testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)

	// refused bounds how long a client that must not be served tries.
	const refused = 3 * time.Second
	for _, c := range []struct {
		name      string
		bootstrap string
	}{
		{"no client certificate", tlsBootstrap(e.addr, f.CAFile, "", "")},
		{"a certificate of another CA", tlsBootstrap(e.addr, f.CAFile, other.CertFile, other.KeyFile)},
		{"plaintext", bootstrap(e.addr, "plain", "")},
	} {
		b, err := newResolver(c.bootstrap)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		conn := dialWith(t, b, "greeter")
		ctx, cancel := context.WithTimeout(context.Background(), refused)
		got, err := testbackend.Call(ctx, conn)
		cancel()
		if err == nil {
			t.Errorf("a client with %s was served (by %s)", c.name, got)
		}
		_ = conn.Close()
	}
	if st := e.cp.Stats(); st.Requests != 0 {
		t.Errorf("the refused clients made %d requests", st.Requests)
	}

	b, err := newResolver(tlsBootstrap(e.addr, f.CAFile, f.CertFile, f.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	callUntil(t, dialWith(t, b, "greeter"), "calling a over TLS with a client certificate", hasAll(a.Addr))
	noNACK(t, e.cp)
}

func TestServerTLSErrors(t *testing.T) {
	f := etcdtest.GenerateTLS(t)
	for _, c := range [][3]string{
		{f.ServerCertFile, "", ""},
		{f.ServerCertFile, f.ServerKeyFile, f.ServerKeyFile}, // not a certificate
		{f.ServerCertFile, f.ServerKeyFile, f.CAFile + ".missing"},
	} {
		if _, err := xds.ServerTLS(c[0], c[1], c[2]); err == nil {
			t.Errorf("ServerTLS(%q, %q, %q) = nil error", c[0], c[1], c[2])
		}
	}
	if _, err := xds.New(nil, xds.WithServices("greeter"), xds.WithTLS(nil)); err == nil {
		t.Error("New with WithTLS(nil) = nil error")
	}
}

func newResolver(bootstrap string) (grpcresolver.Builder, error) {
	return grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
}
