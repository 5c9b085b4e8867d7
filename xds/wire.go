package xds

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/registry"
)

// endpointBytes keeps each instance's serialized LbEndpoint across changes
// of its service, so that a change costs the changed instances, not the
// whole list: building and marshalling every endpoint on each change was
// most of the control plane's time per change (docs/BENCHMARKS.md).
//
// It is used under the caches' lock.
type endpointBytes struct {
	m map[string]endpointEntry // by instance ID
}

// endpointEntry is an instance and its serialized LbEndpoint.
type endpointEntry struct {
	in registry.Instance
	b  []byte
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
			raw = protowire.AppendBytes(raw, eb.get(in, v.metadata))
		}
		loc.ProtoReflect().SetUnknown(raw)
	})
}

// lbEndpointsField is the field number of LocalityLbEndpoints.lb_endpoints.
const lbEndpointsField = 2

// get returns in's serialized LbEndpoint (with its instance when metadata
// is set, which is the same for every call of one Server), marshalling it
// if the instance is new or changed.
func (eb *endpointBytes) get(in registry.Instance, metadata bool) []byte {
	if e, ok := eb.m[in.ID]; ok && e.in.Equal(in) {
		return e.b
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(lbEndpoint(in, metadata))
	if err != nil {
		panic("xds: marshal an endpoint: " + err.Error()) // a message built here always marshals
	}
	if eb.m == nil {
		eb.m = map[string]endpointEntry{}
	}
	eb.m[in.ID] = endpointEntry{in: in, b: b}
	return b
}

// keepOnly forgets the endpoints of instances not in list. It is called
// after list's assignments were built, so the map holds every instance of
// list, and others only if it is larger than list (an instance left).
func (eb *endpointBytes) keepOnly(list []registry.Instance) {
	if len(eb.m) <= len(list) {
		return
	}
	keep := make(map[string]endpointEntry, len(list))
	for _, in := range list {
		if e, ok := eb.m[in.ID]; ok {
			keep[in.ID] = e
		}
	}
	eb.m = keep
}
