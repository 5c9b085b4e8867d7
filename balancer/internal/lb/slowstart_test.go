package lb

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
)

// Factor is Envoy's ramp: max(min, (age/window)^(1/aggression)), 1 after
// the window, for an unknown registration time and when off; a
// registration in the future counts as age 0.
func TestSlowStartFactor(t *testing.T) {
	reg := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lin := SlowStartConfig{Window: 10 * time.Second, Aggression: 1, MinWeightPercent: 10}
	fast := SlowStartConfig{Window: 10 * time.Second, Aggression: 2, MinWeightPercent: 0}
	for _, tc := range []struct {
		c    SlowStartConfig
		age  time.Duration
		want float64
	}{
		{lin, 0, 0.1},
		{lin, 500 * time.Millisecond, 0.1},
		{lin, 5 * time.Second, 0.5},
		{lin, 9 * time.Second, 0.9},
		{lin, 10 * time.Second, 1},
		{lin, time.Hour, 1},
		{lin, -time.Minute, 0.1},
		{fast, 2500 * time.Millisecond, 0.5}, // (0.25)^(1/2)
		{fast, 0, 0},
		{SlowStartConfig{}, 0, 1},
	} {
		if got := tc.c.Factor(reg, reg.Add(tc.age)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%+v at age %v: factor %v, want %v", tc.c, tc.age, got, tc.want)
		}
	}
	if got := lin.Factor(time.Time{}, reg); got != 1 {
		t.Errorf("unknown registration time: factor %v, want 1", got)
	}
	if end, ramping := lin.rampEnds(reg, reg.Add(time.Second)); !ramping || !end.Equal(reg.Add(10*time.Second)) {
		t.Errorf("rampEnds = %v, %v", end, ramping)
	}
	// A weight keeps its precision under the ramp, and never reaches 0.
	if got := ramp(1, 0.37); got != 37 {
		t.Errorf("ramp(1, 0.37) = %d, want 37 (weights scaled by %d)", got, rampScale)
	}
	if got := ramp(1, 0); got != 1 {
		t.Errorf("ramp(1, 0) = %d, want 1", got)
	}
	if got := lin.step(); got != 200*time.Millisecond {
		t.Errorf("step of a 10 s window = %v, want 200ms", got)
	}
}

func TestParseSlowStartConfig(t *testing.T) {
	for _, js := range []string{``, `null`} {
		if c, err := ParseSlowStartConfig([]byte(js)); err != nil || c.Enabled() {
			t.Errorf("ParseSlowStartConfig(%q) = %+v, %v; want off", js, c, err)
		}
	}
	c, err := ParseSlowStartConfig([]byte(`{"window":"30s"}`))
	if err != nil || !c.Equal(SlowStartConfig{Window: 30 * time.Second, Aggression: 1, MinWeightPercent: 10}) {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, tc := range []struct{ js, want string }{
		{`{}`, `slowStart.window: missing`},
		{`{"window":"0s"}`, `slowStart.window: "0s" is not positive`},
		{`{"window":"soon"}`, `slowStart.window: "soon" is not a duration`},
		{`{"window":"61m"}`, `slowStart.window: 1h1m0s is longer than 1h0m0s`},
		{`{"window":"1s","aggression":0.05}`, `slowStart.aggression: 0.05 is out of range 0.1..10`},
		{`{"window":"1s","aggression":11}`, `slowStart.aggression: 11 is out of range 0.1..10`},
		{`{"window":"1s","minWeightPercent":-1}`, `slowStart.minWeightPercent: -1 is out of range 0..100`},
		{`{"window":"1s","ramp":1}`, `slowStart: json: unknown field "ramp"`},
		{`5`, `slowStart: json: cannot unmarshal number`},
	} {
		_, err := ParseSlowStartConfig([]byte(tc.js))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ParseSlowStartConfig(%s) error = %v, want one starting with %q", tc.js, err, tc.want)
		}
	}
}

// The registeredAt table gives endpoints without a Muster instance (gRPC's
// xDS ones) their registration time, and survives a round trip through
// MarshalJSON; bad entries are refused with the address named.
func TestSlowStartRegisteredAt(t *testing.T) {
	js := `{"window":"10s","registeredAt":{"10.0.0.1:80":"2026-01-01T00:00:05.5Z","[::1]:81":"2026-01-01T01:00:00+01:00"}}`
	c, err := ParseSlowStartConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 5, 5e8, time.UTC)
	if got := registeredAt(grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "10.0.0.1:80"}}}, c.Registered); !got.Equal(at) {
		t.Errorf("registeredAt(10.0.0.1:80) = %v, want %v", got, at)
	}
	if got := registeredAt(grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "[::1]:81"}}}, c.Registered); !got.Equal(at.Add(-5500 * time.Millisecond)) {
		t.Errorf("registeredAt([::1]:81) = %v, want midnight UTC", got)
	}
	if got := registeredAt(grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "10.0.0.9:80"}}}, c.Registered); !got.IsZero() {
		t.Errorf("registeredAt of an address not in the table = %v, want zero (not ramped)", got)
	}
	if f := c.Factor(at, at.Add(5*time.Second)); f != 0.5 {
		t.Errorf("Factor at half the window = %v, want 0.5", f)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSlowStartConfig(out)
	if err != nil || !back.Equal(c) {
		t.Errorf("round trip %s → %+v, %v; want %+v", out, back, err, c)
	}
	for _, tc := range []struct{ js, want string }{
		{`{"window":"1s","registeredAt":{"nohost":"2026-01-01T00:00:00Z"}}`, `slowStart.registeredAt: "nohost" is not a host:port address`},
		{`{"window":"1s","registeredAt":{"10.0.0.1:80":"yesterday"}}`, `slowStart.registeredAt: "10.0.0.1:80": "yesterday" is not an RFC 3339 time`},
		{`{"window":"1s","registeredAt":{"10.0.0.1:80":5}}`, `slowStart: json: cannot unmarshal number`},
	} {
		if _, err := ParseSlowStartConfig([]byte(tc.js)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ParseSlowStartConfig(%s) error = %v, want one starting with %q", tc.js, err, tc.want)
		}
	}
}
