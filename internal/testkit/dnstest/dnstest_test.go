package dnstest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Go's own resolver, pointed at the server, finds a name at every address
// it was given, in order, follows a change, and gets NXDOMAIN for a name
// it does not know.
func TestResolverSeesTheRecords(t *testing.T) {
	s := Start(t)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.Addr())
	}}
	lookup := func(name string) ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return r.LookupHost(ctx, name)
	}
	s.Set("cp.muster.test", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1"))
	got, err := lookup("cp.muster.test")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"127.0.0.1", "127.0.0.2", "::1"}; !slices.Equal(got, want) {
		t.Fatalf("cp.muster.test: %v, want %v", got, want)
	}
	s.Set("CP.muster.test.", netip.MustParseAddr("127.0.0.3"))
	if got, err := lookup("cp.muster.test"); err != nil || !slices.Equal(got, []string{"127.0.0.3"}) {
		t.Fatalf("after Set: %v (%v), want [127.0.0.3]", got, err)
	}
	s.Set("cp.muster.test")
	var dnsErr *net.DNSError
	if got, err := lookup("cp.muster.test"); err == nil || !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("a removed name: %v (%v), want not found", got, err)
	}
}
