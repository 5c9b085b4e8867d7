package lb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
)

// Bounds and defaults of SlowStartConfig.
const (
	MaxSlowStartWindow         = time.Hour
	DefaultSlowStartAggression = 1.0
	MinSlowStartAggression     = 0.1
	MaxSlowStartAggression     = 10.0
	DefaultMinWeightPercent    = 10.0
	// rampSteps is how many times a picker is rebuilt over a window at
	// most, each with the ramp's weights of the moment; the steps are
	// between minRampStep and maxRampStep long.
	rampSteps   = 50
	minRampStep = 100 * time.Millisecond
	maxRampStep = time.Second
	// rampScale multiplies every weight while slow start is on, so that
	// a ramped share keeps its precision for small weights (the policies
	// compare weights only with each other).
	rampScale = 100
)

// SlowStartConfig is Envoy's slow_start_config: an endpoint registered less
// than Window ago gets a share of its weight that grows with its age,
// weight × max(MinWeightPercent/100, (age/Window)^(1/Aggression)). The
// age is counted from the instance's registration time (RegisteredAt, as
// the registry keeps it), not from when this client first saw it, so a
// client that starts or restarts does not ramp instances that have been
// serving for longer than the window. An endpoint without a Muster
// instance (gRPC's xDS support's) takes its registration time from
// Registered, the table Muster's xDS control plane writes; an endpoint with
// neither (another resolver's) is not ramped. The zero value (Window 0) is
// off.
type SlowStartConfig struct {
	// Window is how long the ramp lasts; 0 turns slow start off. At most
	// MaxSlowStartWindow.
	Window time.Duration
	// Aggression shapes the ramp: 1 is linear, more than 1 gives a young
	// endpoint more sooner, less than 1 less. MinSlowStartAggression to
	// MaxSlowStartAggression.
	Aggression float64
	// MinWeightPercent is the share of its weight an endpoint gets at
	// least while it ramps, 0 to 100 (a weight never falls below 1).
	MinWeightPercent float64
	// Registered is the registration time of endpoints that carry no
	// Muster instance, by address (the config's "registeredAt" table);
	// nil for none. Never modified once parsed.
	Registered EndpointRegistrations
}

// EndpointRegistrations is a slow-start config's "registeredAt" table: an
// endpoint's registration time by its address (host:port, as the endpoint
// carries it), for endpoints without a Muster instance. Muster's xDS
// control plane writes it into the Cluster for the instances registered
// less than a window ago, since gRPC's xDS endpoints carry no registration
// time.
type EndpointRegistrations map[string]time.Time

// registeredAt returns when the instance behind ep registered: its
// instance's RegisteredAt when the Muster resolver made it, else its first
// address's time in table, else zero (unknown: not ramped).
func registeredAt(ep grpcresolver.Endpoint, table EndpointRegistrations) time.Time {
	if in, ok := lbattr.InstanceOf(ep); ok {
		return in.RegisteredAt
	}
	if len(ep.Addresses) > 0 {
		return table[ep.Addresses[0].Addr]
	}
	return time.Time{}
}

// Equal reports whether c and o are the same config, tables included.
func (c SlowStartConfig) Equal(o SlowStartConfig) bool {
	return c.Window == o.Window && c.Aggression == o.Aggression && c.MinWeightPercent == o.MinWeightPercent &&
		maps.EqualFunc(c.Registered, o.Registered, time.Time.Equal)
}

// Enabled reports whether c ramps anything.
func (c SlowStartConfig) Enabled() bool { return c.Window > 0 }

// Factor returns the share of its weight an endpoint registered at
// registered gets at now, 0 < Factor ≤ 1: 1 once the window has passed
// (or when slow start is off, or registered is unknown). A registration
// time in the future (clocks apart) counts as age 0.
func (c SlowStartConfig) Factor(registered, now time.Time) float64 {
	if !c.Enabled() || registered.IsZero() {
		return 1
	}
	age := max(now.Sub(registered), 0)
	if age >= c.Window {
		return 1
	}
	f := math.Pow(float64(age)/float64(c.Window), 1/c.Aggression)
	return max(f, c.MinWeightPercent/100)
}

// rampEnds returns when the ramp of an endpoint registered at registered
// ends, and whether it is still ramping at now.
func (c SlowStartConfig) rampEnds(registered, now time.Time) (time.Time, bool) {
	if !c.Enabled() || registered.IsZero() {
		return time.Time{}, false
	}
	end := registered.Add(c.Window)
	return end, now.Before(end)
}

// step returns how long a picker built during a ramp is kept before the
// next one takes the ramp's weights of then.
func (c SlowStartConfig) step() time.Duration {
	return min(max(c.Window/rampSteps, minRampStep), maxRampStep)
}

// ramp returns a positive weight scaled by rampScale and factor, at
// least 1.
func ramp(weight int, factor float64) int {
	if factor >= 1 {
		return weight * rampScale
	}
	return max(1, int(math.Round(float64(weight*rampScale)*factor)))
}

type slowStartJSON struct {
	Window           *string           `json:"window"`
	Aggression       *float64          `json:"aggression"`
	MinWeightPercent *float64          `json:"minWeightPercent"`
	RegisteredAt     map[string]string `json:"registeredAt,omitempty"`
}

// ParseSlowStartConfig parses the "slowStart" object of a balancer config:
// an absent (empty) or null object gives the zero config (off); a present
// one needs its window, and defaults aggression to
// DefaultSlowStartAggression and minWeightPercent to
// DefaultMinWeightPercent. Its "registeredAt" table, if any, maps
// host:port addresses to RFC 3339 times (see EndpointRegistrations).
// Errors name the field ("slowStart.window: ..."); the caller prefixes its
// policy name.
func ParseSlowStartConfig(js json.RawMessage) (SlowStartConfig, error) {
	if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return SlowStartConfig{}, nil
	}
	var j slowStartJSON
	if err := DecodeStrict(js, &j); err != nil {
		return SlowStartConfig{}, fmt.Errorf("slowStart: %w", err)
	}
	if j.Window == nil {
		return SlowStartConfig{}, fmt.Errorf("slowStart.window: missing; want a duration up to %v, e.g. \"30s\"", MaxSlowStartWindow)
	}
	c := SlowStartConfig{Aggression: DefaultSlowStartAggression, MinWeightPercent: DefaultMinWeightPercent}
	d, err := ParseDuration("slowStart.window", *j.Window)
	if err != nil {
		return SlowStartConfig{}, err
	}
	if d > MaxSlowStartWindow {
		return SlowStartConfig{}, fmt.Errorf("slowStart.window: %v is longer than %v", d, MaxSlowStartWindow)
	}
	c.Window = d
	if a := j.Aggression; a != nil {
		if math.IsNaN(*a) || *a < MinSlowStartAggression || *a > MaxSlowStartAggression {
			return SlowStartConfig{}, fmt.Errorf("slowStart.aggression: %v is out of range %v..%v", *a, MinSlowStartAggression, MaxSlowStartAggression)
		}
		c.Aggression = *a
	}
	if m := j.MinWeightPercent; m != nil {
		if math.IsNaN(*m) || *m < 0 || *m > 100 {
			return SlowStartConfig{}, fmt.Errorf("slowStart.minWeightPercent: %v is out of range 0..100", *m)
		}
		c.MinWeightPercent = *m
	}
	if c.Registered, err = parseRegistrations(j.RegisteredAt); err != nil {
		return SlowStartConfig{}, err
	}
	return c, nil
}

// parseRegistrations parses the "registeredAt" table; nil when it is
// empty.
func parseRegistrations(raw map[string]string) (EndpointRegistrations, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	table := make(EndpointRegistrations, len(raw))
	for _, addr := range slices.Sorted(maps.Keys(raw)) { // the first bad address, always the same
		if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("slowStart.registeredAt: %q is not a host:port address", addr)
		}
		t, err := time.Parse(time.RFC3339Nano, raw[addr])
		if err != nil {
			return nil, fmt.Errorf("slowStart.registeredAt: %q: %q is not an RFC 3339 time", addr, raw[addr])
		}
		table[addr] = t
	}
	return table, nil
}

// MarshalJSON returns c as the "slowStart" object ParseSlowStartConfig
// reads; null when it is off.
func (c SlowStartConfig) MarshalJSON() ([]byte, error) {
	if !c.Enabled() {
		return []byte("null"), nil
	}
	w := c.Window.String()
	j := slowStartJSON{Window: &w, Aggression: &c.Aggression, MinWeightPercent: &c.MinWeightPercent}
	if len(c.Registered) > 0 {
		j.RegisteredAt = make(map[string]string, len(c.Registered))
		for addr, t := range c.Registered {
			j.RegisteredAt[addr] = t.Format(time.RFC3339Nano)
		}
	}
	return json.Marshal(j)
}
