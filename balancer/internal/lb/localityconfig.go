package lb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// Bounds and default of LocalityConfig.OverprovisioningFactor.
const (
	DefaultOverprovisioningFactor = 1.4
	MinOverprovisioningFactor     = 1.0
	MaxOverprovisioningFactor     = 10.0
)

// LocalityConfig says how calls spill from the client's zone to its region
// and on to the rest (see Spill).
type LocalityConfig struct {
	// OverprovisioningFactor is Envoy's: a level whose healthy fraction
	// is h keeps min(1, factor·h) of the calls that reach it, and the rest
	// spills to the next level. MinOverprovisioningFactor (spill as soon
	// as an endpoint is unhealthy) to MaxOverprovisioningFactor.
	OverprovisioningFactor float64
}

// DefaultLocalityConfig returns the configuration used when a balancer
// config has no "locality" object.
func DefaultLocalityConfig() LocalityConfig {
	return LocalityConfig{OverprovisioningFactor: DefaultOverprovisioningFactor}
}

type localityJSON struct {
	OverprovisioningFactor *float64 `json:"overprovisioningFactor"`
}

// ParseLocalityConfig parses the "locality" object of a balancer config:
// defaults, then the fields present, then validation. An absent (empty) or
// null object gives DefaultLocalityConfig. Errors name the field
// ("locality.overprovisioningFactor: ..."); the caller prefixes its policy
// name.
func ParseLocalityConfig(js json.RawMessage) (LocalityConfig, error) {
	c := DefaultLocalityConfig()
	if len(bytes.TrimSpace(js)) == 0 {
		return c, nil
	}
	var j localityJSON
	if err := DecodeStrict(js, &j); err != nil {
		return LocalityConfig{}, fmt.Errorf("locality: %w", err)
	}
	if j.OverprovisioningFactor != nil {
		f := *j.OverprovisioningFactor
		if math.IsNaN(f) || f < MinOverprovisioningFactor || f > MaxOverprovisioningFactor {
			return LocalityConfig{}, fmt.Errorf("locality.overprovisioningFactor: %v is out of range %v..%v",
				f, MinOverprovisioningFactor, MaxOverprovisioningFactor)
		}
		c.OverprovisioningFactor = f
	}
	return c, nil
}

// MarshalJSON returns c as the "locality" object ParseLocalityConfig reads.
func (c LocalityConfig) MarshalJSON() ([]byte, error) {
	return json.Marshal(localityJSON{OverprovisioningFactor: &c.OverprovisioningFactor})
}
