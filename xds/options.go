package xds

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/registry"
)

// Defaults of the options.
const (
	defaultListInterval = 10 * time.Second
	defaultMaxZones     = 64
	defaultForgetAfter  = 5 * time.Minute
	listTimeout         = 10 * time.Second
	// minRelist is the least time between two listings made because
	// clients asked for services not published.
	minRelist = time.Second
)

// Option configures a Server. An invalid option makes New fail with an
// error naming it.
type Option func(*options)

type options struct {
	services     []string
	policy       LBPolicy
	policies     map[string]LBPolicy
	slowStart    slowStart            // WithSlowStart of every service; off for none
	slowStarts   map[string]slowStart // WithSlowStart of named services
	served       served.Config        // what each service's list goes through: protection, deletion grace, settings
	log          *slog.Logger
	listInterval time.Duration
	maxZones     int
	maxConns     int
	maxStreams   int
	connShare    int // WithClientShare
	streamShare  int
	ipv4Bits     int // WithClientIPv4Prefix; 0: each address a client
	budget       int // WithSubscriptionBudget
	metadata     bool
	callPolicies bool // WithPolicies
	selfCheck    bool // WithSelfCheck
	forgetAfter  time.Duration
	grpcOpts     []grpc.ServerOption
	tlsConfig    *tls.Config // WithTLS
	tlsFiles     *tlsFiles   // WithTLSFiles
	err          error
}

// invalid records an invalid option.
func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("xds: "+format, args...))
}

// setAtLeastOne sets *dst to n, or records that option name got less than
// 1.
func (o *options) setAtLeastOne(name string, n int, dst *int) {
	if n < 1 {
		o.invalid("%s: %d is less than 1", name, n)
		return
	}
	*dst = n
}

// setPositive sets *dst to d, or records that option name got a
// non-positive duration.
func (o *options) setPositive(name string, d time.Duration, dst *time.Duration) {
	if d <= 0 {
		o.invalid("%s: %v is not positive", name, d)
		return
	}
	*dst = d
}

func defaultOptions() options {
	return options{
		policy:       RoundRobin,
		policies:     map[string]LBPolicy{},
		slowStarts:   map[string]slowStart{},
		log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		listInterval: defaultListInterval,
		maxZones:     defaultMaxZones,
		maxConns:     defaultMaxConnections,
		maxStreams:   defaultMaxStreams,
		connShare:    defaultConnectionShare,
		streamShare:  defaultStreamShare,
		budget:       defaultSubscriptionBudget,
		forgetAfter:  defaultForgetAfter,
		served:       served.Defaults(),
	}
}

// WithServices makes the Server publish exactly these services. Without
// it, the Server publishes every service the Discovery lists (it must then
// implement registry.ServiceLister). An invalid service name is an error of
// New.
func WithServices(names ...string) Option {
	return func(o *options) {
		for _, n := range names {
			if err := registry.ValidateName(n); err != nil {
				o.invalid("WithServices: %w", err)
				return
			}
		}
		o.services = append(o.services, names...)
	}
}

// WithLBPolicy sets the load-balancing policy of the Clusters of services, or
// of every service without a policy of its own when services is empty. The
// default is RoundRobin. A policy that is neither built in (RoundRobin,
// RingHash, LeastRequest) nor a valid CustomLBPolicy name (MusterP2C,
// MusterWRR, ...) is an error of New.
func WithLBPolicy(p LBPolicy, services ...string) Option {
	return func(o *options) {
		if !p.valid() {
			o.invalid("WithLBPolicy: invalid policy %q (want %s, %s, %s or the name of a client balancer such as %s)",
				p, RoundRobin, RingHash, LeastRequest, MusterP2C)
			return
		}
		if len(services) == 0 {
			o.policy = p
		}
		for _, s := range services {
			o.policies[s] = p
		}
	}
}

// WithProtection configures empty-list protection, with the meaning and
// defaults of resolver.WithProtection: a list smaller than fraction times
// the largest list published within window is withheld and the last good
// list stays published. A fraction of 0 disables protection. A fraction
// outside 0..1 or a non-positive window is an error of New.
func WithProtection(fraction float64, window time.Duration) Option {
	return func(o *options) {
		if fraction < 0 || fraction > 1 || window <= 0 {
			o.invalid("WithProtection(%v, %v): want a fraction in 0..1 and a positive window", fraction, window)
			return
		}
		o.served.ProtectFraction, o.served.ProtectWindow = fraction, window
	}
}

// WithLogger sets the logger; by default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.invalid("WithLogger: nil logger")
			return
		}
		o.log = l
	}
}

// WithListInterval sets how often the Server lists the Discovery's services
// to follow new ones when no WithServices is given. It also lists them when
// a client asks for a service it does not publish, at most once a second,
// so a new service is found at once by the clients that want it. The
// default is 10 s; a non-positive interval is an error of New.
func WithListInterval(d time.Duration) Option {
	return func(o *options) { o.setPositive("WithListInterval", d, &o.listInterval) }
}

// WithForgetAfter sets how long a service the Server found by listing the
// Discovery (no WithServices) stays published after it has no instance
// left: once its published list has been empty that long and a listing no
// longer names it (no key of it is left in the registry), its resources
// are removed and it is no longer followed, so the services followed stay
// those of the registry instead of growing with every name ever
// registered. A service that comes back is followed and published again
// at the next listing (every WithListInterval). A service still listed is
// never forgotten, and neither are the services of WithServices (a fixed
// set). The time counts from the publication of the empty list, i.e. after
// empty-list protection let it through. The default is 5 minutes; a
// non-positive duration is an error of New.
func WithForgetAfter(d time.Duration) Option {
	return func(o *options) { o.setPositive("WithForgetAfter", d, &o.forgetAfter) }
}

// WithMaxZones bounds the number of client localities (region and zone)
// that get their own endpoint priorities (one endpoint cache each).
// Clients of further localities are served as clients without one. The
// default is 64; n < 1 is an error of New.
func WithMaxZones(n int) Option {
	return func(o *options) { o.setAtLeastOne("WithMaxZones", n, &o.maxZones) }
}

// WithMaxConnections bounds the client connections Serve keeps open at
// once; a connection beyond them is closed as soon as it is accepted, and
// counted (Stats.RefusedConnections). The default is 1,024; n < 1 is an
// error of New. The last sixteenth of them is kept for clients that hold
// none (WithClientShare), and 8 more beyond the bound for clients at
// 127.0.0.1 and ::1 (the host's own), within their share. Under TLS
// (WithTLS, WithTLSFiles) a connection takes its place only once its
// handshake succeeded: until then it holds one of 256 places for
// handshakes in progress, 8 per client (Stats.Handshakes,
// Stats.RefusedHandshakes), so that clients without a certificate hold
// none of the connections' places. All of these together are lowered to
// a quarter of the process's file-descriptor limit, in proportion, so
// that the process (an embedded etcd among it) keeps the files it needs.
// Each connection may open at most 16 streams at once, and must finish
// its TLS handshake and send gRPC's preface within 10 s (docs/XDS.md,
// "Limits").
func WithMaxConnections(n int) Option {
	return func(o *options) { o.setAtLeastOne("WithMaxConnections", n, &o.maxConns) }
}

// WithMaxStreams bounds the ADS streams the Server serves at once, on all
// its connections (and those of Register's grpc.Server). A stream takes
// its place with its first request, which must come within 10 s of its
// start; a stream beyond the bound ends then with ResourceExhausted, and
// is counted (Stats.Refused). The last sixteenth of the places is kept for
// clients that hold none (WithClientShare). The default is 4,096; n < 1 is
// an error of New.
func WithMaxStreams(n int) Option {
	return func(o *options) { o.setAtLeastOne("WithMaxStreams", n, &o.maxStreams) }
}

// WithSubscriptionBudget bounds what the open ADS streams' subscriptions
// may make the Server hold, all streams together: each subscribed name is
// counted for its bytes and 64 more. A request that would pass it ends its
// stream with ResourceExhausted, counted (Stats.Refused); what the streams
// hold is Stats.SubscriptionBytes. The default is 128 MiB: a client
// following 100 services (four names each) is counted for about 34 KiB,
// so 3,900 such clients fit; the heap holds about 1.5 bytes for each byte
// counted. bytes < 1 is an error of New.
func WithSubscriptionBudget(bytes int) Option {
	return func(o *options) { o.setAtLeastOne("WithSubscriptionBudget", bytes, &o.budget) }
}

// WithClientShare bounds the connections (of Serve) and the ADS streams
// one client may hold at once, clients grouped by address: an IPv6
// address by its /64, an IPv4 address by itself. So that one host cannot
// take every place of WithMaxConnections and WithMaxStreams, and a client
// that holds none is admitted while others hold their shares. The defaults
// are 64 connections and 256 streams: a gRPC client opens one connection
// and one stream per control plane. conns or streams < 1 is an error of
// New.
func WithClientShare(conns, streams int) Option {
	return func(o *options) {
		o.setAtLeastOne("WithClientShare", conns, &o.connShare)
		o.setAtLeastOne("WithClientShare", streams, &o.streamShare)
	}
}

// WithClientIPv4Prefix groups IPv4 clients by their first bits (8..32) for
// the shares of WithClientShare, the handshakes' and the places kept for
// clients that hold none: with 24, every address of a /24 is one client,
// for clients that draw their addresses from a range. The default, 32,
// makes each address a client; IPv6 clients are always grouped by their
// /64. A value out of 8..32 is an error.
func WithClientIPv4Prefix(bits int) Option {
	return func(o *options) {
		if bits < 8 || bits > 32 {
			o.invalid("WithClientIPv4Prefix(%d): want 8..32", bits)
			return
		}
		o.ipv4Bits = bits
	}
}

// WithEndpointMetadata makes every endpoint carry its instance under the
// filter-metadata key MetadataKey: a struct with "id", "version", "zone",
// "region" (when set), "weight" and "metadata" (the instance's own string
// pairs), for proxies
// and tools that read endpoint metadata. No gRPC client reads it, and
// decoding it is most of a grpc-go client's work on each change of a large
// service (docs/BENCHMARKS.md), so it is off by default.
func WithEndpointMetadata() Option {
	return func(o *options) { o.metadata = true }
}

// WithCanaries makes the Server follow each service's canary setting in src
// (registry/etcd's Canaries), as resolver.WithCanaries does for muster:///
// channels: a service with colored instances then sends the setting's share
// of its uncolored calls to the setting's color (docs/XDS.md, "Colors").
// Without it (the default) uncolored calls all go to the base. A nil src is
// an error of New.
func WithCanaries(src registry.CanarySource) Option {
	return func(o *options) {
		if src == nil {
			o.invalid("WithCanaries: nil source")
			return
		}
		o.served.Canaries = src
	}
}

// WithPolicies makes the Server follow each service's call policy in src
// (registry/etcd's Policies), as resolver.WithPolicies does, and publish
// it: the timeout and retries in every route, outlier ejection and the cap
// on calls in flight in every Cluster, the affinity header in ring hash
// routes (docs/POLICY.md says what each client does with each). nil is an
// error of New; without the option no policy is published.
func WithPolicies(src registry.PolicySource) Option {
	return func(o *options) {
		if src == nil {
			o.invalid("WithPolicies: nil source")
			return
		}
		o.served.Policies = src
		o.callPolicies = true
	}
}

// WithGRPCServerOptions adds options to the grpc.Server that Serve creates.
func WithGRPCServerOptions(opts ...grpc.ServerOption) Option {
	return func(o *options) {
		o.grpcOpts = append(o.grpcOpts, opts...)
	}
}

// WithSelfCheck makes the Server check every resource before it publishes
// it against the preconditions that gRPC's xDS clients (grpc-go,
// grpc-java, the C-core, grpc-js-xds, at the support floor and the newest
// version) put on what they receive: integer ranges as each client reads
// them, uniqueness keys as each keys its entries, forms each accepts
// (docs/XDS.md, "Client preconditions"). A resource that breaks one is
// published all the same; each breach is logged at error level, naming
// the rule, the resource, the clients and their source, and counted
// (Stats.SelfCheckViolations). A breach is a bug in Muster: some client
// would reject, misread or crash on the resource. Off by default (it
// decodes every resource once more); muster xds --self-check turns it on,
// and every test of the control plane runs with it.
func WithSelfCheck() Option {
	return func(o *options) { o.selfCheck = true }
}

// pipelineConfig is what each service's list goes through, logged with the
// Server's logger.
func (o *options) pipelineConfig() served.Config {
	cfg := o.served
	cfg.Logger = o.log
	return cfg
}
