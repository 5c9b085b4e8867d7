package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SchemaVersion is the value format version written in every value ("v").
const SchemaVersion = 1

// ErrUnsupportedVersion is matched by the error Unmarshal returns for a value
// whose schema version ("v") this code does not read.
var ErrUnsupportedVersion = errors.New("registry: unsupported value schema version")

// ErrMalformedValue is matched by the error Unmarshal returns for a value
// that is not a JSON object of the expected shape.
var ErrMalformedValue = errors.New("registry: malformed value")

// wireInstance is the JSON form of an Instance. Weight is a pointer so that
// a missing weight (DefaultWeight) differs from weight 0 (draining).
type wireInstance struct {
	V            int               `json:"v"`
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Version      string            `json:"version,omitempty"`
	Addr         string            `json:"addr"`
	Zone         string            `json:"zone,omitempty"`
	Region       string            `json:"region,omitempty"`
	Weight       *int              `json:"weight,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	RegisteredAt string            `json:"registered_at,omitempty"`
}

// Marshal validates and normalizes in and returns its JSON value, with the
// schema version set. The weight is always written (0 when draining).
func Marshal(in Instance) ([]byte, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	id := in.ID
	if id == "" {
		id = in.Addr // as Normalize does
	}
	w := in.EffectiveWeight()
	wi := wireInstance{
		V: SchemaVersion, ID: id, Name: in.Name, Version: in.Version,
		Addr: in.Addr, Zone: in.Zone, Region: in.Region, Weight: &w, Metadata: in.Metadata,
	}
	if !in.RegisteredAt.IsZero() {
		wi.RegisteredAt = in.RegisteredAt.UTC().Format(time.RFC3339Nano)
	}
	size := 128 + len(wi.ID) + len(wi.Name) + len(wi.Version) + len(wi.Addr) + len(wi.Zone) + len(wi.Region) + len(wi.RegisteredAt)
	for k, v := range wi.Metadata {
		size += len(k) + len(v) + 6
	}
	if b, ok := appendWire(make([]byte, 0, size), &wi); ok {
		return b, nil
	}
	return json.Marshal(wi)
}

// Unmarshal decodes and validates a value written by Marshal. A missing
// weight decodes as DefaultWeight; weight 0 decodes as Draining. Unknown
// fields are ignored, so that a later minor addition to schema version 1
// can be read. The error matches ErrUnsupportedVersion for another schema
// version, ErrMalformedValue for a value that is not JSON of the expected
// shape, and ErrInvalidInstance for a decoded instance that fails Validate.
func Unmarshal(data []byte) (Instance, error) {
	var wi wireInstance
	if !parseWire(data, &wi) {
		wi = wireInstance{}
		if err := json.Unmarshal(data, &wi); err != nil {
			return Instance{}, fmt.Errorf("%w: %v", ErrMalformedValue, err)
		}
	}
	if wi.V != SchemaVersion {
		return Instance{}, fmt.Errorf("%w: got v=%d, this code reads v=%d", ErrUnsupportedVersion, wi.V, SchemaVersion)
	}
	in := Instance{
		ID: wi.ID, Name: wi.Name, Version: wi.Version, Addr: wi.Addr,
		Zone: wi.Zone, Region: wi.Region, Weight: DefaultWeight, Metadata: wi.Metadata,
	}
	if wi.Weight != nil {
		in.Weight = *wi.Weight
		in.Draining = in.Weight == 0
	}
	if wi.RegisteredAt != "" {
		t, err := time.Parse(time.RFC3339Nano, wi.RegisteredAt)
		if err != nil {
			return Instance{}, fmt.Errorf("%w: registered_at: %v", ErrMalformedValue, err)
		}
		in.RegisteredAt = t
	}
	if in.ID == "" {
		return Instance{}, fieldErr("id", "must not be empty")
	}
	if err := in.Validate(); err != nil {
		return Instance{}, err
	}
	return in, nil
}
