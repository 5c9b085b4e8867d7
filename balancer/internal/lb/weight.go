package lb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

// EndpointWeights is a balancer config's "endpointWeights" table: an
// endpoint's weight by its address, for endpoints that carry no Muster
// instance (those of gRPC's xDS support, whose EDS weights no other module
// can read). Muster's xDS control plane writes it into the Cluster; an
// address it leaves out weighs registry.DefaultWeight. A parsed table is
// never modified, so it may be shared by pickers and configs.
type EndpointWeights map[string]int

// weightOf returns an endpoint's weight: its instance's EffectiveWeight
// when the Muster resolver made it (0 for a draining instance), else its
// first address's weight in table, else registry.DefaultWeight (100), e.g.
// for endpoints of other resolvers.
func weightOf(ep grpcresolver.Endpoint, table EndpointWeights) int {
	if in, ok := lbattr.InstanceOf(ep); ok {
		return in.EffectiveWeight()
	}
	if len(ep.Addresses) > 0 {
		if w, ok := table[ep.Addresses[0].Addr]; ok {
			return w
		}
	}
	return registry.DefaultWeight
}

// ParseEndpointWeights parses the "endpointWeights" object of a balancer
// config: addresses (host:port, as the endpoints carry them) to weights
// 1..registry.MaxWeight. An absent (empty) or null object gives nil, which
// weighs every endpoint without an instance registry.DefaultWeight. Errors
// name the field and the address ("endpointWeights: \"10.0.0.7:9000\":
// ..."); the caller prefixes its policy name.
func ParseEndpointWeights(js json.RawMessage) (EndpointWeights, error) {
	if len(bytes.TrimSpace(js)) == 0 {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := DecodeStrict(js, &raw); err != nil {
		return nil, fmt.Errorf("endpointWeights: %w", err)
	}
	table := make(EndpointWeights, len(raw))
	for _, addr := range slices.Sorted(maps.Keys(raw)) { // the first bad address, always the same
		v := raw[addr]
		if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("endpointWeights: %q is not a host:port address", addr)
		}
		var w int
		if err := json.Unmarshal(v, &w); err != nil {
			return nil, fmt.Errorf("endpointWeights: %q: weight %s is not an integer", addr, bytes.TrimSpace(v))
		}
		if w < 1 || w > registry.MaxWeight {
			return nil, fmt.Errorf("endpointWeights: %q: weight %s is out of range 1..%d", addr, bytes.TrimSpace(v), registry.MaxWeight)
		}
		table[addr] = w
	}
	if len(table) == 0 {
		return nil, nil
	}
	return table, nil
}
