package console

import (
	"strings"
	"testing"
	"time"
)

// Login attempts are counted per client group: two IPv6 addresses of one
// /64 share one allowance (a host's /64 is free to it), another /64 has
// its own, and an IPv4 address its own.
func TestLoginThrottleGroupsIPv6By64(t *testing.T) {
	lt := newLoginThrottle()
	now := time.Now()
	try := func(addr string) string {
		done, why := lt.admit(addr, "alice", now)
		if done != nil {
			done(true)
		}
		return why
	}
	for i := range loginBurst {
		if why := try("[fd00::1]:1000"); why != "" {
			t.Fatalf("attempt %d of a burst of %d: %s", i+1, loginBurst, why)
		}
	}
	if why := try("[fd00::ffff:2]:2000"); !strings.Contains(why, "too many login attempts") {
		t.Errorf("another address of the same /64: %q, want its group's allowance spent", why)
	}
	for _, other := range []string{"[fd00:0:0:1::1]:1000", "10.0.0.1:1000"} {
		if why := try(other); why != "" {
			t.Errorf("%s: %q, want an allowance of its own", other, why)
		}
	}
}
