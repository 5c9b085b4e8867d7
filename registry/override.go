package registry

import (
	"encoding/json"
	"fmt"
	"strings"
)

// OverrideSuffix is the last element of an override key:
// <prefix>/<service>/<id>/override.
const OverrideSuffix = "override"

// Override is an operator's change to one registered instance, stored
// under the instance's override key (OverrideKey) and merged into the
// instance by Discovery. The instance's own registrar never writes it; it
// is bound to the instance's lease, so it leaves with the instance. Its
// JSON form is {"v":1,"weight":N}.
type Override struct {
	// Weight, when set, replaces the instance's weight; 0 drains it (it
	// takes no new calls). It never undrains an instance registered
	// Draining (one whose own health is not SERVING, see package server):
	// the instance's drain and the operator's both hold.
	Weight *int `json:"weight,omitempty"`
}

// OverrideKey returns the key of the override of one instance.
func OverrideKey(prefix, service, id string) string {
	return Key(prefix, service, id) + "/" + OverrideSuffix
}

// ParseOverrideKey reports whether key is an override key made by
// OverrideKey and returns the key of the instance it applies to.
func ParseOverrideKey(prefix, key string) (instanceKey string, ok bool) {
	instanceKey, ok = strings.CutSuffix(key, "/"+OverrideSuffix)
	if !ok {
		return "", false
	}
	if _, _, err := ParseKey(prefix, instanceKey); err != nil {
		return "", false
	}
	return instanceKey, true
}

// Apply returns in with the override applied.
func (o Override) Apply(in Instance) Instance {
	if o.Weight != nil {
		in.Weight = *o.Weight
		in.Draining = in.Draining || *o.Weight == 0
	}
	return in
}

type wireOverride struct {
	V      int  `json:"v"`
	Weight *int `json:"weight,omitempty"`
}

// MarshalOverride validates o and returns its JSON value.
func MarshalOverride(o Override) ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(wireOverride{V: SchemaVersion, Weight: o.Weight})
}

// UnmarshalOverride decodes and validates an override value. Errors match
// ErrMalformedValue, ErrUnsupportedVersion or ErrInvalidInstance, as
// Unmarshal's do.
func UnmarshalOverride(data []byte) (Override, error) {
	var w wireOverride
	if err := json.Unmarshal(data, &w); err != nil {
		return Override{}, fmt.Errorf("%w: override: %v", ErrMalformedValue, err)
	}
	if w.V != SchemaVersion {
		return Override{}, fmt.Errorf("%w: override has v=%d, this code reads v=%d", ErrUnsupportedVersion, w.V, SchemaVersion)
	}
	o := Override{Weight: w.Weight}
	if err := o.validate(); err != nil {
		return Override{}, err
	}
	return o, nil
}

func (o Override) validate() error {
	if o.Weight != nil && (*o.Weight < 0 || *o.Weight > MaxWeight) {
		return fieldErr("weight", "override weight %d is out of range 0..%d", *o.Weight, MaxWeight)
	}
	return nil
}
