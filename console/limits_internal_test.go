package console

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// Login attempts are counted per client group: two IPv6 addresses of one
// /64 share one allowance (a host's /64 is free to it), another /64 has
// its own, and an IPv4 address its own.
func TestLoginThrottleGroupsIPv6By64(t *testing.T) {
	lt := newLoginThrottle(0)
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

// With WithClientIPv4Prefix(24) the IPv4 addresses of one /24 share one
// allowance of logins and one share of event streams.
func TestClientIPv4PrefixGroupsLoginsAndStreams(t *testing.T) {
	lt := newLoginThrottle(24)
	now := time.Now()
	for i := range loginBurst {
		done, why := lt.admit("10.0.0.1:1000", "alice", now)
		if done == nil {
			t.Fatalf("attempt %d of a burst of %d: %s", i+1, loginBurst, why)
		}
		done(true)
	}
	if _, why := lt.admit("10.0.0.200:2000", "alice", now); !strings.Contains(why, "too many login attempts") {
		t.Errorf("another address of the same /24: %q, want its group's allowance spent", why)
	}
	if done, why := lt.admit("10.0.1.1:1000", "alice", now); done == nil {
		t.Errorf("an address of another /24: %q, want an allowance of its own", why)
	}
	slots := newStreamSlots(24)
	for i := range slots.anyone.Share {
		if _, err := slots.anyone.Acquire("10.0.0." + strconv.Itoa(i+1) + ":1"); err != nil {
			t.Fatalf("stream %d of the /24: %v", i+1, err)
		}
	}
	if _, err := slots.anyone.Acquire("10.0.0.250:1"); err == nil {
		t.Error("a stream beyond the /24's share was admitted")
	}
	if o := buildOptions([]Option{WithClientIPv4Prefix(33)}); o.err == nil || !strings.Contains(o.err.Error(), "WithClientIPv4Prefix(33)") {
		t.Errorf("WithClientIPv4Prefix(33): %v, want an error naming it", o.err)
	}
}
