package kubernetes

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/musterhq/muster/registry"
)

// Metadata keys of the instances this package makes.
const (
	// MetaNamespace is the metadata key of the service's namespace.
	MetaNamespace = "k8s.namespace"
	// MetaPod is the metadata key of the endpoint's pod (its targetRef,
	// when that is a Pod).
	MetaPod = "k8s.pod"
	// MetaNode is the metadata key of the node hosting the endpoint.
	MetaNode = "k8s.node"
)

// state is what an endpoint's conditions make of it.
type state int

const (
	absent   state = iota // not serving: left out
	draining              // serving and terminating: weight 0
	ready                 // takes calls
)

// stateOf maps an endpoint's conditions: ready (nil means true) takes
// calls; not ready but serving (nil means true) and terminating (nil
// means false) drains; anything else is absent.
func stateOf(c discoveryv1.EndpointConditions) state {
	isReady := c.Ready == nil || *c.Ready
	serving := c.Serving == nil || *c.Serving
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case isReady:
		return ready
	case serving && terminating:
		return draining
	default:
		return absent
	}
}

// mapping turns the EndpointSlices of one service into its instances. It
// is pure: no I/O, no clock.
type mapping struct {
	service      string // the Muster name, "name.namespace"
	namespace    string
	port         string // "": the slice's only port
	versionLabel string // "": no version
}

// skip records endpoints of a slice left out of the list, and why.
type skip struct {
	slice     string
	endpoints int
	reason    string
}

// candidate is an instance before duplicates are resolved.
type candidate struct {
	in    registry.Instance
	state state
}

// instances returns the instances of every slice, aggregated, sorted by
// ID, with the endpoints it skipped. An address in several slices is
// listed once, ready preferred over draining, then the slice first by
// name. An ID (pod name) held by several addresses (a dual-stack pod)
// gives way to the address as the ID of each. An instance equal to the
// one with its ID in prev is prev's pointer.
func (m mapping) instances(all []*discoveryv1.EndpointSlice, prev []*registry.Instance) ([]*registry.Instance, []skip) {
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	var skips []skip
	byAddr := map[string]candidate{}
	var order []string // addresses in the order first seen
	for _, sl := range all {
		port, err := m.portOf(sl)
		if err != nil {
			if len(sl.Endpoints) > 0 {
				skips = append(skips, skip{slice: sl.Name, endpoints: len(sl.Endpoints), reason: err.Error()})
			}
			continue
		}
		for i, ep := range sl.Endpoints {
			st := stateOf(ep.Conditions)
			if st == absent {
				continue
			}
			in, err := m.instance(sl, ep, port, st)
			if err != nil {
				skips = append(skips, skip{slice: sl.Name, endpoints: 1, reason: fmt.Sprintf("endpoint %d: %v", i, err)})
				continue
			}
			old, seen := byAddr[in.Addr]
			if !seen {
				order = append(order, in.Addr)
			}
			if !seen || st > old.state {
				byAddr[in.Addr] = candidate{in: in, state: st}
			}
		}
	}
	ids := make(map[string]int, len(byAddr))
	for _, c := range byAddr {
		ids[c.in.ID]++
	}
	prevByID := make(map[string]*registry.Instance, len(prev))
	for _, p := range prev {
		prevByID[p.ID] = p
	}
	list := make([]*registry.Instance, 0, len(byAddr))
	for _, addr := range order {
		in := byAddr[addr].in
		if ids[in.ID] > 1 {
			in.ID = in.Addr
		}
		if p := prevByID[in.ID]; p != nil && p.Equal(in) {
			list = append(list, p)
			continue
		}
		list = append(list, &in)
	}
	slices.SortFunc(list, func(a, b *registry.Instance) int { return strings.Compare(a.ID, b.ID) })
	return list, skips
}

// portOf returns the number of the slice's port that m selects.
func (m mapping) portOf(sl *discoveryv1.EndpointSlice) (int32, error) {
	var found *discoveryv1.EndpointPort
	switch {
	case m.port == "" && len(sl.Ports) == 1:
		found = &sl.Ports[0]
	case m.port == "":
		return 0, fmt.Errorf("slice has %d ports; choose one by name with WithPort", len(sl.Ports))
	default:
		for i, p := range sl.Ports {
			if p.Name != nil && *p.Name == m.port {
				found = &sl.Ports[i]
				break
			}
		}
		if found == nil {
			return 0, fmt.Errorf("slice has no port named %q", m.port)
		}
	}
	if found.Port == nil {
		return 0, fmt.Errorf("slice's port has no number (all ports)")
	}
	if found.Protocol != nil && *found.Protocol != corev1.ProtocolTCP {
		return 0, fmt.Errorf("slice's port is %s, not TCP", *found.Protocol)
	}
	return *found.Port, nil
}

// instance maps one endpoint, and validates the result.
func (m mapping) instance(sl *discoveryv1.EndpointSlice, ep discoveryv1.Endpoint, port int32, st state) (registry.Instance, error) {
	if len(ep.Addresses) == 0 {
		return registry.Instance{}, fmt.Errorf("no address")
	}
	in := registry.Instance{
		Name:     m.service,
		Addr:     net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port))),
		Draining: st == draining,
		Metadata: map[string]string{MetaNamespace: m.namespace},
	}
	if ep.Zone != nil {
		in.Zone = *ep.Zone
	}
	if ep.NodeName != nil && *ep.NodeName != "" {
		in.Metadata[MetaNode] = *ep.NodeName
	}
	if ref := ep.TargetRef; ref != nil && ref.Name != "" {
		if ref.Kind == "Pod" {
			in.Metadata[MetaPod] = ref.Name
		}
		if registry.ValidateID(ref.Name) == nil {
			in.ID = ref.Name
		}
	}
	if m.versionLabel != "" {
		in.Version = sl.Labels[m.versionLabel]
	}
	if err := in.Validate(); err != nil {
		return registry.Instance{}, err
	}
	return in.Normalize(), nil
}
