package xds_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	grpcresolver "google.golang.org/grpc/resolver"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/internal/xdsbootstrap"
	"github.com/musterhq/muster/xds"
)

// tlsBootstrap is the bootstrap of muster xds-bootstrap --xds-cacert
// --xds-cert --xds-key: tls channel credentials (gRFC A65, file names).
func tlsBootstrap(addr, caFile, certFile, keyFile string) string {
	return bootstrapOf(xdsbootstrap.Config{Servers: []string{addr}, NodeID: "tls-client", CACert: caFile, Cert: certFile, Key: keyFile})
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

// WithTLSFiles's files rotate without a restart. The control plane starts
// with a certificate of one CA and requires client certificates of it; the
// files are then replaced by those of another CA. A client trusting (and
// presenting a certificate of) only the new CA is refused before and
// served after; the old client's established stream keeps following the
// registry; a new connection of the old CA is refused. A broken change (a
// certificate that does not match the key, a file that is not PEM) keeps
// the last good pair in use and is counted.
func TestTLSReload(t *testing.T) {
	before, after := etcdtest.GenerateTLS(t), etcdtest.GenerateTLS(t)
	dir := t.TempDir()
	cert, key, ca := filepath.Join(dir, "cp.pem"), filepath.Join(dir, "cp-key.pem"), filepath.Join(dir, "clients-ca.pem")
	install := func(f *etcdtest.TLSFiles) {
		installFile(t, f.ServerCertFile, cert)
		installFile(t, f.ServerKeyFile, key)
		installFile(t, f.CAFile, ca)
	}
	install(before)
	e := newEnv(t, xds.WithServices("greeter"), xds.WithTLSFiles(cert, key, ca))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	client := func(f *etcdtest.TLSFiles) *grpc.ClientConn {
		r, err := newResolver(tlsBootstrap(e.addr, f.CAFile, f.CertFile, f.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		return dialWith(t, r, "greeter")
	}

	established := client(before)
	callUntil(t, established, "calling a with the first CA", hasAll(a.Addr))
	refused(t, client(after), "a client of the next CA, before the rotation")

	install(after)
	callUntil(t, client(after), "calling a with the next CA, after the rotation", hasAll(a.Addr))
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	callUntil(t, established, "calling b over the stream established before the rotation", hasAll(b.Addr))
	refused(t, client(before), "a new client of the first CA, after the rotation")
	if st := e.cp.Stats(); st.TLSReloads == 0 {
		t.Errorf("TLSReloads = 0 after the rotation: %+v", st)
	}

	for _, broken := range []struct {
		name  string
		write func()
	}{
		{"a certificate that does not match the key", func() { installFile(t, before.ServerCertFile, cert) }},
		{"a certificate file that is not PEM", func() { writeFile(t, cert, []byte("not a certificate\n")) }},
	} {
		errs := e.cp.Stats().TLSReloadErrors
		broken.write()
		callUntil(t, client(after), "calling with the next CA after "+broken.name, hasAll(a.Addr, b.Addr))
		waitStats(t, e.cp, "the broken change counted", func(st xds.Stats) bool { return st.TLSReloadErrors > errs })
	}
	noNACK(t, e.cp)
}

// refused fails the test if a call on conn succeeds within 3 s.
func refused(t *testing.T, conn *grpc.ClientConn, who string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if got, err := testbackend.Call(ctx, conn); err == nil {
		t.Errorf("%s was served (by %s)", who, got)
	}
	_ = conn.Close()
}

// installFile replaces dst by a copy of src, as rotations do: written
// beside it, then renamed over it.
func installFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, b)
}

func writeFile(t *testing.T, dst string, b []byte) {
	t.Helper()
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
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
	for name, opts := range map[string][]xds.Option{
		"WithTLS(nil)":                  {xds.WithTLS(nil)},
		"WithTLSFiles without a key":    {xds.WithTLSFiles(f.ServerCertFile, "", "")},
		"WithTLSFiles of missing files": {xds.WithTLSFiles(f.ServerCertFile+".missing", f.ServerKeyFile, "")},
		"WithTLS and WithTLSFiles":      {xds.WithTLS(f.ClientTLS()), xds.WithTLSFiles(f.ServerCertFile, f.ServerKeyFile, "")},
	} {
		if _, err := xds.New(nil, append([]xds.Option{xds.WithServices("greeter")}, opts...)...); err == nil {
			t.Errorf("New with %s = nil error", name)
		}
	}
}

func newResolver(bootstrap string) (grpcresolver.Builder, error) {
	return grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
}

// Under TLS with client certificates required, a connection takes a
// connection's place only once its handshake succeeded: 100 silent
// connections from one address hold 8 handshake places (the rest refused
// and counted) and no connection's; 96 more from 12 addresses, more than
// the 16 connection places, hold handshake places only; a client with a
// certificate from another address is served meanwhile, and it alone
// holds a connection. Counting at accept, the silent connections take
// every connection's place and the certified client is refused.
func TestTLSHandshakesHoldNoConnectionPlaces(t *testing.T) {
	f := etcdtest.GenerateTLS(t)
	cfg, err := xds.ServerTLS(f.ServerCertFile, f.ServerKeyFile, f.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, xds.WithServices("greeter"), xds.WithTLS(cfg), xds.WithMaxConnections(16))
	start := time.Now() // the silent connections are closed 10 s after they came
	holdOpen(t, e.addr, "127.0.0.2", 100)
	st := waitStats(t, e.cp, "every silent connection held or refused", func(st xds.Stats) bool {
		return st.Handshakes+st.Connections+int(st.RefusedHandshakes+st.RefusedConnections) >= 100
	})
	if st.Handshakes != 8 || st.Connections != 0 || st.RefusedHandshakes != 92 {
		t.Errorf("100 silent connections of one address: %d handshakes, %d connections held, %d handshakes refused; want 8, 0, 92",
			st.Handshakes, st.Connections, st.RefusedHandshakes)
	}
	for i := range 12 {
		holdOpen(t, e.addr, fmt.Sprintf("127.0.0.%d", i+3), 8)
	}
	st = waitStats(t, e.cp, "every silent connection held or refused", func(st xds.Stats) bool {
		return st.Handshakes+st.Connections+int(st.RefusedHandshakes+st.RefusedConnections) >= 196
	})
	if st.Connections != 0 {
		t.Errorf("silent connections hold %d connection places, want none", st.Connections)
	}
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(8*time.Second))
	defer cancel()
	if err := answered(ctx, clientFrom(t, e.addr, "127.0.0.200", credentials.NewTLS(f.ClientTLS()))); err != nil {
		t.Fatalf("a client with a certificate while 13 addresses hold silent connections: %v, want served", err)
	}
	st = e.cp.Stats()
	fds, _ := os.ReadDir("/proc/self/fd") // none where there is no /proc
	t.Logf("after %v: %d handshakes, %d connections held; %d handshakes, %d connections refused; the test process (both ends, etcd too): %d files, %d goroutines",
		time.Since(start).Round(time.Millisecond), st.Handshakes, st.Connections, st.RefusedHandshakes, st.RefusedConnections, len(fds), runtime.NumGoroutine())
	if st.Connections != 1 {
		t.Errorf("Connections = %d, want 1: the certified client's", st.Connections)
	}
}

// holdOpen opens n TCP connections from the loopback address src to addr
// and sends nothing on them; they are closed at the test's end.
func holdOpen(t *testing.T, addr, src string, n int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
}
