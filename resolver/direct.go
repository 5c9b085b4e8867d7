package resolver

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	grpcresolver "google.golang.org/grpc/resolver"
)

// DirectScheme is the scheme of static targets: "direct:///host1:port1,host2:port2".
const DirectScheme = "direct"

// DirectBuilder resolves static targets listing their addresses:
// "direct:///10.0.0.7:9000,10.0.0.8:9000" or, for IPv6,
// "direct:///[::1]:9000". The first state is delivered at once, the
// addresses sorted. Use it with grpc.WithResolvers; it needs no registry.
type DirectBuilder struct{}

var _ grpcresolver.Builder = DirectBuilder{}

// NewDirectBuilder returns a DirectBuilder.
func NewDirectBuilder() DirectBuilder { return DirectBuilder{} }

// Scheme returns DirectScheme.
func (DirectBuilder) Scheme() string { return DirectScheme }

// Build parses the target and pushes its addresses. An empty list, a
// malformed address or a duplicate is an error naming it.
func (DirectBuilder) Build(target grpcresolver.Target, cc grpcresolver.ClientConn, _ grpcresolver.BuildOptions) (grpcresolver.Resolver, error) {
	addrs, err := parseDirect(target.URL.Host, strings.TrimPrefix(target.URL.Path, "/"))
	if err != nil {
		return nil, err
	}
	eps := make([]grpcresolver.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: a}}}
	}
	if err := cc.UpdateState(grpcresolver.State{Endpoints: eps}); err != nil {
		return nil, fmt.Errorf("resolver: direct: %w", err)
	}
	return directResolver{}, nil
}

func parseDirect(authority, list string) ([]string, error) {
	if authority != "" {
		return nil, fmt.Errorf("%w: direct target has authority %q; the addresses go in the path: direct:///%s", ErrBadTarget, authority, authority)
	}
	if list == "" {
		return nil, fmt.Errorf("%w: direct target lists no address; want direct:///host:port[,host:port...]", ErrBadTarget)
	}
	seen := map[string]bool{}
	var out []string
	for _, a := range strings.Split(list, ",") {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%w: direct target address %q: %v", ErrBadTarget, a, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
			return nil, fmt.Errorf("%w: direct target address %q: want host:port with a port 1..65535", ErrBadTarget, a)
		}
		if seen[a] {
			return nil, fmt.Errorf("%w: direct target lists %q twice", ErrBadTarget, a)
		}
		seen[a] = true
		out = append(out, a)
	}
	sort.Strings(out)
	return out, nil
}

type directResolver struct{}

func (directResolver) ResolveNow(grpcresolver.ResolveNowOptions) {}
func (directResolver) Close()                                    {}
