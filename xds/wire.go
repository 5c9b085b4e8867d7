package xds

import (
	"sort"
	"strconv"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/registry"
)

// endpointBytes keeps each instance's serialized LbEndpoint across changes
// of its service, so that a change costs the changed instances, not the
// whole list: building an endpoint and, above all, marshalling its muster
// metadata Struct (deterministically: its maps are sorted) was most of the
// control plane's time per change (at 150 instances, 290 µs to build the
// assignment and 515 µs to marshal it, against 68 µs without the
// metadata; see docs/BENCHMARKS.md).
//
// It is used under the caches' lock.
type endpointBytes struct {
	m map[string][]byte // by instanceKey
}

// wireAssignment returns assignment(service, list, v) with each
// locality's endpoints carried as their serialized bytes (unknown fields of
// the LocalityLbEndpoints, field lb_endpoints), which marshal as they are.
// The result marshals to the same message a client decodes from
// assignment's; it is only for sending and comparing.
func (eb *endpointBytes) wireAssignment(service string, list []registry.Instance, v view) *endpointv3.ClusterLoadAssignment {
	return assignmentWith(service, list, v, func(loc *endpointv3.LocalityLbEndpoints, ins []registry.Instance) {
		var raw []byte
		for _, in := range ins {
			raw = protowire.AppendTag(raw, lbEndpointsField, protowire.BytesType)
			raw = protowire.AppendBytes(raw, eb.get(in))
		}
		loc.ProtoReflect().SetUnknown(raw)
	})
}

// lbEndpointsField is the field number of LocalityLbEndpoints.lb_endpoints.
const lbEndpointsField = 2

// get returns in's serialized LbEndpoint, marshalling it if it is new.
func (eb *endpointBytes) get(in registry.Instance) []byte {
	k := instanceKey(in)
	if b, ok := eb.m[k]; ok {
		return b
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(lbEndpoint(in))
	if err != nil {
		panic("xds: marshal an endpoint: " + err.Error()) // a message built here always marshals
	}
	if eb.m == nil {
		eb.m = map[string][]byte{}
	}
	eb.m[k] = b
	return b
}

// keepOnly forgets the endpoints of instances not in list. It is called
// after list's assignments were built, so the map holds every instance of
// list, and others only if it is larger than list.
func (eb *endpointBytes) keepOnly(list []registry.Instance) {
	if len(eb.m) <= len(list) {
		return
	}
	keep := make(map[string][]byte, len(list))
	for _, in := range list {
		k := instanceKey(in)
		if b, ok := eb.m[k]; ok {
			keep[k] = b
		}
	}
	eb.m = keep
}

// instanceKey is a key of everything lbEndpoint reads from an instance:
// each string prefixed with its length, so that no two instances that
// differ share a key.
func instanceKey(in registry.Instance) string {
	var b []byte
	str := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	str(in.ID)
	str(in.Addr)
	str(in.Zone)
	str(in.Version)
	b = strconv.AppendInt(b, int64(in.EffectiveWeight()), 10)
	if len(in.Metadata) > 0 {
		keys := make([]string, 0, len(in.Metadata))
		for k := range in.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			str(k)
			str(in.Metadata[k])
		}
	}
	return string(b)
}
