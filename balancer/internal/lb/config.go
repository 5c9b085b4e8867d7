package lb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/musterhq/muster/registry"
)

// Defaults of OutlierConfig, used for every field the "outlier" object
// leaves out.
const (
	DefaultConsecutiveFailures = 5
	DefaultBaseEjectionTime    = 30 * time.Second
	DefaultMaxEjectionTime     = 300 * time.Second
	DefaultMaxEjectionPercent  = 50
)

// OutlierConfig says when an endpoint is ejected and for how long.
type OutlierConfig struct {
	// ConsecutiveFailures is how many failed calls in a row eject an
	// endpoint. 0 disables ejection.
	ConsecutiveFailures int
	// BaseEjectionTime is the first ejection's length; the k-th ejection in
	// a row lasts k times as long, up to MaxEjectionTime.
	BaseEjectionTime time.Duration
	// MaxEjectionTime caps an ejection's length.
	MaxEjectionTime time.Duration
	// MaxEjectionPercent caps the share of the picker's endpoints ejected
	// at once: the percentage rounded down, at least one, never all of
	// them. 0 disables ejection.
	MaxEjectionPercent int

	// FailurePercent, when > 0, also ejects by failure percentage (gRFC
	// A50): at the end of each Interval, an endpoint that completed at
	// least MinRequests calls in it, of which more than FailurePercent %
	// failed, is ejected, when at least FailurePercentMinimumHosts
	// endpoints completed MinRequests calls. It comes from a call policy
	// (WithPolicy), never from the balancer config's JSON.
	FailurePercent int
	// MinRequests is the calls an endpoint needs in an interval to be
	// judged by failure percentage.
	MinRequests int
	// Interval is the failure-percentage window. The window is closed by
	// the first call completing after it ended, so with sparse traffic it
	// lasts longer.
	Interval time.Duration
}

// FailurePercentInterval is the failure-percentage window of a call
// policy's ejection, as the xDS control plane publishes it (1 s).
const FailurePercentInterval = time.Second

// FailurePercentMinimumHosts is how many endpoints must have completed
// MinRequests calls in a window for any of them to be judged, as the xDS
// control plane publishes it: two, so that small services are guarded.
const FailurePercentMinimumHosts = 2

// WithPolicy returns c with a call policy's outlier ejection applied: when
// p ejects (FailurePercent > 0), ejection by failure percentage with p's
// threshold and minimum of calls, every FailurePercentInterval, and p's
// base ejection time and cap on the share ejected, which win over c's; c's
// maximum ejection time is raised to p's base when shorter. c's
// consecutive-failures ejection is kept. A p that does not eject returns c
// unchanged.
func (c OutlierConfig) WithPolicy(p registry.OutlierPolicy) OutlierConfig {
	if p.FailurePercent <= 0 {
		return c
	}
	p = registry.Policy{Outlier: p}.Normalize().Outlier
	c.FailurePercent = min(p.FailurePercent, 100)
	c.MinRequests = max(p.MinRequests, 1)
	c.Interval = FailurePercentInterval
	c.BaseEjectionTime = p.BaseEjection
	c.MaxEjectionTime = max(c.MaxEjectionTime, p.BaseEjection)
	c.MaxEjectionPercent = p.MaxEjectedPercent
	return c
}

// DefaultOutlierConfig returns the configuration used when a balancer
// config has no "outlier" object.
func DefaultOutlierConfig() OutlierConfig {
	return OutlierConfig{
		ConsecutiveFailures: DefaultConsecutiveFailures,
		BaseEjectionTime:    DefaultBaseEjectionTime,
		MaxEjectionTime:     DefaultMaxEjectionTime,
		MaxEjectionPercent:  DefaultMaxEjectionPercent,
	}
}

// Enabled reports whether the configuration ejects anything.
func (c OutlierConfig) Enabled() bool { return c.consecutive() || c.percentage() }

// consecutive reports whether consecutive failures eject.
func (c OutlierConfig) consecutive() bool {
	return c.ConsecutiveFailures > 0 && c.MaxEjectionPercent > 0
}

// percentage reports whether failure percentages eject.
func (c OutlierConfig) percentage() bool {
	return c.FailurePercent > 0 && c.MaxEjectionPercent > 0 && c.Interval > 0
}

// outlierJSON is the "outlier" object. Pointers tell a field left out
// (default) from one set to its zero value.
type outlierJSON struct {
	ConsecutiveFailures *int    `json:"consecutiveFailures"`
	BaseEjectionTime    *string `json:"baseEjectionTime"`
	MaxEjectionTime     *string `json:"maxEjectionTime"`
	MaxEjectionPercent  *int    `json:"maxEjectionPercent"`
}

// ParseOutlierConfig parses the "outlier" object of a balancer config:
// defaults, then the fields present, then validation. An absent (empty) or
// null object gives DefaultOutlierConfig. Errors name the field
// ("outlier.baseEjectionTime: ..."); the caller prefixes its policy name.
func ParseOutlierConfig(js json.RawMessage) (OutlierConfig, error) {
	c := DefaultOutlierConfig()
	if len(bytes.TrimSpace(js)) == 0 {
		return c, nil
	}
	var j outlierJSON
	if err := DecodeStrict(js, &j); err != nil {
		return OutlierConfig{}, fmt.Errorf("outlier: %w", err)
	}
	if j.ConsecutiveFailures != nil {
		if n := *j.ConsecutiveFailures; n < 0 {
			return OutlierConfig{}, fmt.Errorf("outlier.consecutiveFailures: %d is negative; want 0 (no ejection) or more", n)
		}
		c.ConsecutiveFailures = *j.ConsecutiveFailures
	}
	var err error
	if j.BaseEjectionTime != nil {
		if c.BaseEjectionTime, err = ParseDuration("outlier.baseEjectionTime", *j.BaseEjectionTime); err != nil {
			return OutlierConfig{}, err
		}
	}
	if j.MaxEjectionTime != nil {
		if c.MaxEjectionTime, err = ParseDuration("outlier.maxEjectionTime", *j.MaxEjectionTime); err != nil {
			return OutlierConfig{}, err
		}
	}
	if c.MaxEjectionTime < c.BaseEjectionTime {
		return OutlierConfig{}, fmt.Errorf("outlier.maxEjectionTime: %v is shorter than outlier.baseEjectionTime %v", c.MaxEjectionTime, c.BaseEjectionTime)
	}
	if j.MaxEjectionPercent != nil {
		if p := *j.MaxEjectionPercent; p < 0 || p > 100 {
			return OutlierConfig{}, fmt.Errorf("outlier.maxEjectionPercent: %d is out of range 0..100", p)
		}
		c.MaxEjectionPercent = *j.MaxEjectionPercent
	}
	return c, nil
}

// MarshalJSON returns c as the "outlier" object ParseOutlierConfig reads,
// every field present. A parsed balancer config must marshal back to what
// it was parsed from: grpc-go's xDS support marshals a config built by
// ParseConfig and parses the result again on its way to the balancer.
func (c OutlierConfig) MarshalJSON() ([]byte, error) {
	base, maxT := c.BaseEjectionTime.String(), c.MaxEjectionTime.String()
	return json.Marshal(outlierJSON{
		ConsecutiveFailures: &c.ConsecutiveFailures,
		BaseEjectionTime:    &base,
		MaxEjectionTime:     &maxT,
		MaxEjectionPercent:  &c.MaxEjectionPercent,
	})
}

// ParseDuration parses a positive duration in Go's syntax ("30s", "1.5s",
// "250ms", "5m"), naming field in its error.
func ParseDuration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration; want e.g. \"30s\" or \"250ms\"", field, s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s: %q is not positive", field, s)
	}
	return d, nil
}

// DecodeStrict decodes the JSON object js into v, rejecting unknown fields
// and anything after the object.
func DecodeStrict(js json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}
