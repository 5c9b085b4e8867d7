package xds

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/registry"
)

// The table holds the instances registered less than a window ago, by
// their canonical address; older ones and those without a registration
// time are left out (full share), and so is everything when slow start is
// off.
func TestSlowStartFor(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	list, bad := usable([]registry.Instance{
		{Name: "greeter", ID: "young", Addr: "[::ffff:10.0.0.1]:80", RegisteredAt: now.Add(-time.Second)},
		{Name: "greeter", ID: "edge", Addr: "10.0.0.2:80", RegisteredAt: now.Add(-time.Minute)},
		{Name: "greeter", ID: "old", Addr: "10.0.0.3:80", RegisteredAt: now.Add(-time.Hour)},
		{Name: "greeter", ID: "unknown", Addr: "10.0.0.4:80"},
	})
	if len(bad) != 0 {
		t.Fatalf("skipped %v", bad)
	}
	ss := slowStartFor(slowStart{window: time.Minute, aggression: 1, minWeightPercent: 10}, list, now)
	if len(ss.registered) != 1 || !ss.registered["10.0.0.1:80"].Equal(now.Add(-time.Second)) {
		t.Errorf("registered = %v, want only 10.0.0.1:80 (canonical) at %v", ss.registered, now.Add(-time.Second))
	}
	if off := slowStartFor(slowStart{}, list, now); off.enabled() || off.registered != nil {
		t.Errorf("slow start off: %+v, want zero", off)
	}
}

// What the control plane writes is what Muster's balancers accept, and the
// bounds WithSlowStart enforces are the balancers' own: each value on
// either side of a bound is accepted or refused by both alike.
func TestSlowStartBounds(t *testing.T) {
	reg := time.Date(2026, 1, 1, 12, 0, 0, 123456789, time.UTC)
	mc := musterConfig{weights: map[string]int{"10.0.0.1:80": 200},
		slowStart: slowStart{window: 30 * time.Second, aggression: 2, minWeightPercent: 5, registered: map[string]time.Time{"10.0.0.1:80": reg, "[::1]:81": reg}}}
	for _, p := range []LBPolicy{MusterP2C, MusterWRR} {
		_, js := balancerConfig(t, p, mc)
		parser := balancer.Get(string(p)).(balancer.ConfigParser)
		cfg, err := parser.ParseConfig(js)
		if err != nil {
			t.Errorf("%s rejects the config the control plane writes, %s: %v", p, js, err)
			continue
		}
		back, _ := json.Marshal(cfg)
		t.Logf("%s: %s → %s", p, js, back)
	}
	for _, tc := range []struct {
		window           time.Duration
		aggression, minW float64
	}{
		{time.Hour, 1, 10}, {time.Hour + time.Nanosecond, 1, 10}, {time.Nanosecond, 1, 10},
		{time.Minute, 0.1, 10}, {time.Minute, 0.0999, 10}, {time.Minute, 10, 10}, {time.Minute, 10.001, 10},
		{time.Minute, 1, 0}, {time.Minute, 1, -0.001}, {time.Minute, 1, 100}, {time.Minute, 1, 100.001},
	} {
		o := defaultOptions()
		WithSlowStart(tc.window, tc.aggression, tc.minW)(&o)
		js := fmt.Sprintf(`{"slowStart":{"window":%q,"aggression":%v,"minWeightPercent":%v}}`, tc.window, tc.aggression, tc.minW)
		for _, p := range []LBPolicy{MusterP2C, MusterWRR} {
			_, err := balancer.Get(string(p)).(balancer.ConfigParser).ParseConfig([]byte(js))
			if (o.err == nil) != (err == nil) {
				t.Errorf("WithSlowStart(%v, %v, %v): %v; %s of %s: %v; want both to accept or both to refuse", tc.window, tc.aggression, tc.minW, o.err, p, js, err)
			}
		}
	}
}
