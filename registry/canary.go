package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Canary is an operator's setting for one service: Percent of the
// uncolored calls to the service go to its instances of Color (see package
// color) instead of the base. It is stored under CanaryKey, outside the
// instances' key range, bound to no lease (it outlives every instance), and
// followed live by clients (resolver.WithCanaries). Its JSON form is
// {"v":1,"color":"blue","percent":5}.
type Canary struct {
	// Color is the color that takes the share; not empty.
	Color string `json:"color"`
	// Percent is the share of uncolored calls sent to Color, 0..100.
	Percent float64 `json:"percent"`
}

// CanaryKey returns the key of the canary setting of service:
// "<prefix>.canary/<service>" (by default "/muster/services.canary/user"),
// which no watch on the service's instances ("<prefix>/<service>/") sees.
func CanaryKey(prefix, service string) string {
	return strings.TrimRight(prefix, "/") + ".canary/" + service
}

type wireCanary struct {
	V int `json:"v"`
	Canary
}

// Validate checks a canary setting: a color of 1 to MaxMetadataValueLen
// bytes and a percent in 0..100.
func (c Canary) Validate() error {
	if c.Color == "" || len(c.Color) > MaxMetadataValueLen {
		return settingErr("canary", "color", "canary color %q must have 1 to %d bytes", c.Color, MaxMetadataValueLen)
	}
	if !(c.Percent >= 0 && c.Percent <= 100) { // also rejects NaN
		return settingErr("canary", "percent", "canary percent %v is out of range 0..100", c.Percent)
	}
	return nil
}

// MarshalCanary validates c and returns its JSON value.
func MarshalCanary(c Canary) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(wireCanary{V: SchemaVersion, Canary: c})
}

// UnmarshalCanary decodes and validates a canary value. Errors match
// ErrMalformedValue, ErrUnsupportedVersion or ErrInvalidInstance, as
// Unmarshal's do.
func UnmarshalCanary(data []byte) (Canary, error) {
	var w wireCanary
	if err := json.Unmarshal(data, &w); err != nil {
		return Canary{}, fmt.Errorf("%w: canary: %v", ErrMalformedValue, err)
	}
	if w.V != SchemaVersion {
		return Canary{}, fmt.Errorf("%w: canary has v=%d, this code reads v=%d", ErrUnsupportedVersion, w.V, SchemaVersion)
	}
	if err := w.Canary.Validate(); err != nil {
		return Canary{}, err
	}
	return w.Canary, nil
}

// CanarySource follows the canary settings of services; a backend that
// stores them implements it (registry/etcd's Canaries) and the resolver
// reads it (resolver.WithCanaries).
type CanarySource interface {
	// WatchCanary follows service's canary setting until ctx ends and
	// returns at once. The channel receives the setting when it is first
	// read and after each change, the zero Canary for none; it coalesces
	// (a slow reader gets the latest) and is closed after ctx ends.
	WatchCanary(ctx context.Context, service string) <-chan Canary
}
