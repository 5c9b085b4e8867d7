package server

import (
	"net"
	"testing"
)

func TestAdvertise(t *testing.T) {
	tcp := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cases := []struct {
		explicit string
		listen   net.Addr
		want     string
	}{
		{"10.0.0.7:9000", tcp("0.0.0.0:1234"), "10.0.0.7:9000"},
		{"", tcp("127.0.0.1:1234"), "127.0.0.1:1234"},
		{"", tcp("[::1]:1234"), "[::1]:1234"},
	}
	for _, c := range cases {
		got, err := advertise(c.explicit, c.listen)
		if err != nil || got != c.want {
			t.Errorf("advertise(%q, %v) = %q, %v; want %q", c.explicit, c.listen, got, err, c.want)
		}
	}
	// A wildcard listener is advertised on a routable address of the
	// machine, never on the wildcard itself.
	got, err := advertise("", tcp("0.0.0.0:1234"))
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(got)
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() || port != "1234" {
		t.Fatalf("wildcard listener advertised as %q", got)
	}
}

func TestRoutableIPPreference(t *testing.T) {
	ips := []net.IP{net.ParseIP("fe80::1"), net.ParseIP("2001:db8::5"), net.ParseIP("169.254.1.1"), net.ParseIP("10.1.2.3")}
	if got := routableIP(ips); got != "10.1.2.3" {
		t.Fatalf("routableIP = %s, want the global unicast IPv4 10.1.2.3", got)
	}
	if got := routableIP(ips[:2]); got != "2001:db8::5" {
		t.Fatalf("routableIP without IPv4 = %s, want 2001:db8::5", got)
	}
	if got := routableIP(nil); got != "127.0.0.1" {
		t.Fatalf("routableIP with no interface = %s, want 127.0.0.1", got)
	}
}
