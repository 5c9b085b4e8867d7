package lb

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
)

// ColorConfig says how a balancer routes calls by color (see package
// color): which instance metadata entry holds an endpoint's color, and
// what a colored call does when no endpoint of its color is READY.
type ColorConfig struct {
	// Key is the instance metadata key that holds an endpoint's color;
	// an endpoint without it (or not made by the Muster resolver) is the
	// base. "" turns routing off: every call picks among every endpoint,
	// as before colors existed (e.g. for a channel already filtered to
	// one color by "?meta.color=blue").
	Key string
	// Strict makes a colored call with no READY endpoint of its color fail
	// with codes.Unavailable instead of going to the base.
	Strict bool
}

// DefaultColorConfig returns the configuration used when a balancer config
// has no "colors" object: routing on the "color" metadata key, falling
// back to the base.
func DefaultColorConfig() ColorConfig {
	return ColorConfig{Key: color.DefaultInstanceKey}
}

// colorJSON is the "colors" object. Pointers tell a field left out
// (default) from one set to its zero value.
type colorJSON struct {
	Key    *string `json:"key"`
	Strict *bool   `json:"strict"`
}

// ParseColorConfig parses the "colors" object of a balancer config:
// defaults, then the fields present, then validation. An absent (empty) or
// null object gives DefaultColorConfig. Errors name the field
// ("colors.key: ..."); the caller prefixes its policy name.
func ParseColorConfig(js json.RawMessage) (ColorConfig, error) {
	c := DefaultColorConfig()
	if len(bytes.TrimSpace(js)) == 0 {
		return c, nil
	}
	var j colorJSON
	if err := DecodeStrict(js, &j); err != nil {
		return ColorConfig{}, fmt.Errorf("colors: %w", err)
	}
	if j.Key != nil {
		if n := len(*j.Key); n > registry.MaxMetadataKeyLen {
			return ColorConfig{}, fmt.Errorf("colors.key: %d bytes is longer than %d", n, registry.MaxMetadataKeyLen)
		}
		c.Key = *j.Key
	}
	if j.Strict != nil {
		c.Strict = *j.Strict
	}
	return c, nil
}

// MarshalJSON returns c as the "colors" object ParseColorConfig reads,
// every field present, so that a parsed config marshals back to itself.
func (c ColorConfig) MarshalJSON() ([]byte, error) {
	return json.Marshal(colorJSON{Key: &c.Key, Strict: &c.Strict})
}
