package legacy

import (
	"encoding/json"
	"fmt"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

var _ etcd.Layout = (*Naming)(nil)

// Naming is the layout of etcd's client/v3/naming/endpoints (the resolver
// of "etcd:///<target>"): key "<target>/<anything>", value the JSON
// {"Op":0,"Addr":"host:port","Metadata":...}. The target of a service is
// its name unless WithName maps it.
type Naming struct{ o options }

// namingUpdate is the JSON of etcd naming's endpoint value.
type namingUpdate struct {
	Op       int
	Addr     string
	Metadata any
}

// NewNaming returns etcd naming's layout.
func NewNaming(opts ...Option) (*Naming, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Naming{o: o}, nil
}

// String names the layout, "etcd-naming", as Discovery logs and the muster
// command do.
func (n *Naming) String() string { return "etcd-naming" }

// Prefix returns "<target>/", what etcd's resolver watches.
func (n *Naming) Prefix(service string) string { return n.o.name(service) + "/" }

// Decode reads an etcd naming value: its address, and its metadata when it
// is a map of strings (other metadata is left out: Muster's is strings
// only). The ID is the rest of the key after "<target>/", escaped where it
// is not a valid ID. A value that is not JSON is bad.
func (n *Naming) Decode(service, suffix string, value []byte) (registry.Instance, error) {
	var v namingUpdate
	if err := json.Unmarshal(value, &v); err != nil {
		return registry.Instance{}, fmt.Errorf("legacy: etcd naming value: %w", err)
	}
	return registry.Instance{
		Name: service, ID: instanceID(suffix), Addr: v.Addr, Metadata: stringMap(v.Metadata),
	}, nil
}

// stringMap returns md as a map of strings if it is a JSON object whose
// values are all strings, else nil.
func stringMap(md any) map[string]string {
	m, ok := md.(map[string]any)
	if !ok || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		out[k] = s
	}
	return out
}
