package admission

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A group holds at most its share; the pool at most Max; the last Reserve
// places go only to groups that hold none; a release gives one place back,
// once.
func TestPool(t *testing.T) {
	p := &Pool{What: "streams", Max: 10, Share: 4, Reserve: 3}
	take := func(addr string) (func(), error) { return p.Acquire(addr) }
	var releases []func()
	for i := range 4 {
		r, err := take("10.0.0.1:1000")
		if err != nil {
			t.Fatalf("place %d of a share of 4: %v", i+1, err)
		}
		releases = append(releases, r)
	}
	if _, err := take("10.0.0.1:1001"); err == nil || !strings.Contains(err.Error(), "at most 4 streams") {
		t.Errorf("a 5th place of one client: %v, want the share named", err)
	}
	for range 3 {
		if _, err := take("10.0.0.2:1"); err != nil {
			t.Fatal(err)
		}
	}
	// 7 held: the last 3 are the reserve.
	if _, err := take("10.0.0.2:2"); err == nil || !strings.Contains(err.Error(), "kept for clients that hold none") {
		t.Errorf("a client holding places, into the reserve: %v, want refused", err)
	}
	for _, a := range []string{"10.0.0.3:1", "[fd00::1]:1", "10.0.0.4:1"} {
		if _, err := take(a); err != nil {
			t.Errorf("a client holding none, from the reserve: %v", err)
		}
	}
	if _, err := take("10.0.0.5:1"); err == nil || !strings.Contains(err.Error(), "at most 10 streams") {
		t.Errorf("an 11th place: %v, want the pool's bound named", err)
	}
	releases[0]()
	releases[0]()
	if p.Held() != 9 {
		t.Errorf("held %d after one release called twice, want 9", p.Held())
	}
}

// Clients at 127.0.0.1 and ::1 take the Loopback places when the other
// bounds refuse them, within their share; other loopback addresses do not.
func TestPoolLoopback(t *testing.T) {
	p := &Pool{What: "connections", Max: 2, Share: 3, Loopback: 3}
	for _, a := range []string{"10.0.0.1:1", "127.0.0.1:1"} {
		if _, err := p.Acquire(a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Acquire("127.0.0.2:1"); err == nil {
		t.Errorf("127.0.0.2 with every place taken: admitted, want refused")
	}
	var releases []func()
	for _, a := range []string{"127.0.0.1:2", "[::1]:1", "[::ffff:127.0.0.1]:3"} {
		r, err := p.Acquire(a)
		if err != nil {
			t.Errorf("%s with every place taken: %v, want a Loopback place", a, err)
		}
		releases = append(releases, r)
	}
	if _, err := p.Acquire("[::1]:2"); err == nil {
		t.Errorf("::1 with every Loopback place taken: admitted, want refused")
	}
	if got := p.Held(); got != 5 {
		t.Errorf("held %d, want 5 (2 and 3 Loopback places)", got)
	}
	releases[1]()
	// 127.0.0.1 holds its share (3): no Loopback place is its.
	if _, err := p.Acquire("127.0.0.1:4"); err == nil || !strings.Contains(err.Error(), "at most 3 connections") {
		t.Errorf("127.0.0.1 beyond its share: %v, want its share named", err)
	}
	if p.Refused() != 3 {
		t.Errorf("Refused = %d, want 3", p.Refused())
	}
}

// IPv6 clients are grouped by /64, IPv4 ones by address or IPv4Bits.
func TestGroup(t *testing.T) {
	p := &Pool{}
	for addr, want := range map[string]string{
		"[fd00:1:2:3::1]:80":   "fd00:1:2:3::/64",
		"[fd00:1:2:3:ffff::9]": "fd00:1:2:3::/64",
		"10.1.2.3:9":           "10.1.2.3/32",
		"[::ffff:10.1.2.3]:9":  "10.1.2.3/32",
		"@":                    "@",
	} {
		if got := p.Group(addr); got != want {
			t.Errorf("Group(%q) = %q, want %q", addr, got, want)
		}
	}
	p.IPv4Bits = 24
	if got := p.Group("10.1.2.3:9"); got != "10.1.2.0/24" {
		t.Errorf("IPv4Bits 24: %q, want 10.1.2.0/24", got)
	}
}

// Split keeps wants within the file budget: as given when they fit, else
// scaled down, each positive want to at least 1.
func TestSplit(t *testing.T) {
	if got := Split(16, 0, LoopbackPlaces); got[0] != 16 || got[1] != 0 || got[2] != LoopbackPlaces {
		t.Errorf("Split(16, 0, %d) = %v, want it as given", LoopbackPlaces, got)
	}
	huge := 1 << 40
	got := Split(huge, huge/4, LoopbackPlaces)
	if budget := Connections(huge); got[0]+got[1]+got[2] > budget+2 || got[2] < 1 || got[1] < 1 {
		t.Errorf("Split(%d, %d, %d) = %v: want a sum within the budget %d, each at least 1", huge, huge/4, LoopbackPlaces, got, budget)
	}
}
