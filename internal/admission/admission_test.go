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
