package proctest

import (
	"net"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPortsAreDistinctBelowTheEphemeralRangeAndFreedOnRelease(t *testing.T) {
	var res Ports
	const n = 40
	seen := make(map[int]bool)
	for i := range n {
		host := "127.0.0.1"
		if i%4 == 3 {
			host = ""
		}
		p, err := res.Pick(host)
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d picked twice", p)
		}
		seen[p] = true
	}
	if lo, hi, ok := pickRange(); ok {
		for p := range seen {
			if p < lo || p >= hi {
				t.Errorf("port %d outside [%d, %d), below the ephemeral range", p, lo, hi)
			}
		}
	} else {
		t.Log("no ephemeral range here: ports came from the kernel")
	}
	// Held until Release, free after it.
	for p := range seen {
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			ln.Close()
			t.Fatalf("port %d free before Release", p)
		}
	}
	res.Release()
	for p := range seen {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d after Release: %v", p, err)
		}
		ln.Close()
	}
}

func TestParsePortRange(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"32768\t60999\n", 32768, true},
		{"1024 65535", 1024, true},
		{"", 0, false},
		{"32768", 0, false},
		{"x 60999", 0, false},
		{"0 60999", 0, false},
		{"70000 80000", 0, false},
	} {
		got, err := parsePortRange(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parsePortRange(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}
