package resolver

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/registry"
)

// Dial opens a gRPC channel to a service of store's registry: target is
// the service and, as in a "muster:///" target, its query ("user",
// "user?zone=eu-1a", "user?lb=wrr"; see Targets). The channel follows the
// service's instances through store's Discovery, and its canary and call
// policy (WithCanaries and WithPolicies, for a store that is a
// registry.CanarySource or PolicySource, as every backend's is), and
// balances with muster_p2c unless the target or opts choose otherwise
// (see Balancing). It is New(store.Discovery(), WithCanaries(store),
// WithPolicies(store)) and Builder.Dial.
//
// Dial chooses no transport credentials: opts must (as for
// grpc.NewClient), with grpc.WithTransportCredentials, TLS or
// insecure.NewCredentials() for plain text on a network the caller
// trusts; without them Dial fails. Like grpc.NewClient it does not
// connect: calls made before the service has an instance fail at once
// with Unavailable, unless made with grpc.WaitForReady(true) (they then
// wait for one, up to their deadline). A target that does not parse is an
// error matching ErrBadTarget.
//
// Each Dial builds a Builder of its own over the store: the service's
// instances, canary and policy come from the store's one watch of each,
// whatever the number of channels (every backend's Store shares its
// followers among their readers). One channel per service serves a whole
// process (a grpc.ClientConn is safe for concurrent use); channels that
// need more (WithZone, WithSubset, WithSnapshotDir,
// WithPolicyServiceConfig, ...) use New and Builder.Dial. The store must
// outlive the channel; closing the channel leaves the store open.
func Dial(store registry.Store, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if store == nil {
		return nil, errors.New("resolver: Dial: nil store")
	}
	var ropts []Option
	if src, ok := store.(registry.CanarySource); ok {
		ropts = append(ropts, WithCanaries(src))
	}
	if src, ok := store.(registry.PolicySource); ok {
		ropts = append(ropts, WithPolicies(src))
	}
	b, err := New(store.Discovery(), ropts...)
	if err != nil {
		return nil, err
	}
	return b.Dial(target, opts...)
}

// Dial opens a gRPC channel to target through b: the service and its
// query, as for the function Dial ("user?zone=eu-1a"), resolved as
// "<scheme>:///<target>" (WithScheme). It is grpc.NewClient with
// grpc.WithResolvers(b) and opts, which must choose the transport
// credentials. A target that does not parse is an error matching
// ErrBadTarget; a Builder of NewBuilder given an invalid option returns
// that option's error.
func (b *Builder) Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if b.opts.err != nil {
		return nil, b.opts.err
	}
	if strings.Contains(target, "://") {
		return nil, fmt.Errorf("%w: Dial(%q): give the service and its query (user?zone=eu-1a), not a URL", ErrBadTarget, target)
	}
	full := b.opts.scheme + ":///" + target
	u, err := url.Parse(full)
	if err != nil {
		return nil, fmt.Errorf("%w: Dial(%q): %v", ErrBadTarget, target, err)
	}
	if _, err := parseTarget(*u); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(full, append([]grpc.DialOption{grpc.WithResolvers(b)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("resolver: Dial(%q): %w", target, err)
	}
	return conn, nil
}
