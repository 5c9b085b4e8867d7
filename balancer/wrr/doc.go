// Package wrr provides the muster_wrr gRPC load balancing policy: smooth
// weighted round robin (nginx's algorithm) over the READY endpoints, by
// the weight of each endpoint's registry instance.
//
// # Use
//
// Importing the package registers the policy with gRPC under Name (in
// init, grpc-go's only mechanism, as its own balancer/roundrobin does);
// select it in the service config:
//
//	import _ "github.com/musterhq/muster/balancer/wrr"
//
//	conn, err := grpc.NewClient("muster:///user",
//		grpc.WithResolvers(builder),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_wrr":{}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// It works with any resolver. Endpoints of the Muster resolver
// (github.com/musterhq/muster/resolver) carry their instance's weight
// (registry.Instance.EffectiveWeight); others weigh their first address's
// entry in the config's "endpointWeights" table, else
// registry.DefaultWeight (100), which without a table makes the policy a
// plain round robin. Under xDS (a Cluster naming muster_wrr, see
// github.com/musterhq/muster/xds), Muster's control plane writes that
// table from the registry, since grpc-go keeps the EDS endpoint weights
// where no other module can read them.
//
// # Order
//
// nginx's smooth weighted round robin gives every endpoint a current
// weight, initially 0; each pick adds each endpoint's weight to its
// current weight, takes the endpoint with the largest (the first one on a
// tie, in address order), and subtracts the total weight from the winner's.
// Weights 5, 1, 1 give a, a, b, a, c, a, a rather than a, a, a, a, a, b, c.
// The picker computes one period of that sequence when it is built (the
// weights divided by their greatest common divisor; when the period would
// exceed 16384 picks, the weights are scaled down to fit, which changes the
// shares by well under one percent) and then only advances an atomic
// counter, starting at a random point so that clients do not move in step.
// The pick path takes no lock and does not allocate.
//
// Weights: an endpoint of weight 0 (a draining instance) gets no new calls
// unless every READY endpoint has weight 0, in which case they are served
// in turn as if equal.
//
// # Outlier ejection and health checking
//
// consecutiveFailures failed calls in a row (default 5) eject an endpoint
// for baseEjectionTime × the number of ejections in a row (default 30s,
// capped at maxEjectionTime, default 300s). At most maxEjectionPercent of
// the READY endpoints (default 50%, rounded down, at least one) are ejected
// at once, and never all. A pick whose turn falls on an ejected endpoint
// goes to the endpoint of another turn of the sequence, drawn by hashing
// the turn, so that the ejected endpoint's share is spread over the others
// in proportion to their weights. When an ejection ends, one
// call (the probe) is let through: its success ends the ejection, its
// failure starts the next, longer one. The count of ejections in a row
// starts over after an endpoint stays healthy for maxEjectionTime.
// Failures are the codes Unavailable, DeadlineExceeded, ResourceExhausted,
// Internal, DataLoss, Unimplemented, and errors without a gRPC status
// (transport errors); calls the caller canceled count neither way. The
// balancer keeps this state per address for as
// long as the endpoint is in the resolver state and for a retention time
// (the longer of 5 minutes and maxEjectionTime) after it leaves it, across
// pickers, reconnects and membership changes.
//
// With a service call policy that ejects (registry.Policy's
// outlier.failurePercent, followed with resolver.WithPolicies), endpoints
// are also ejected by failure percentage (gRFC A50): over each 1 s window
// (closed by the first call that completes after it), an endpoint that
// completed outlier.minRequests calls, more than outlier.failurePercent %
// of them failed, is ejected, when at least two endpoints completed that
// many; the worst first, within the cap. The policy's values win over
// this config's: its baseEjection replaces baseEjectionTime, its
// maxEjectedPercent maxEjectionPercent, and maxEjectionTime is raised to
// the base when shorter; consecutiveFailures still ejects as configured
// (0 leaves ejection to the policy). Ejections end by the probe as above.
// The window costs a clock read and two atomic adds per successful call
// while the policy ejects, nothing otherwise.
//
// With "healthCheckConfig" in the service config (and the client
// importing google.golang.org/grpc/health), each endpoint is health
// checked with the standard gRPC health service, and one that is not
// SERVING gets no calls.
//
// # Colors and canaries
//
// An endpoint whose Muster instance has a "color" metadata entry (the key
// is colors.key) belongs to that color; the others are the base. A call
// colored with color.WithColor (header x-muster-color) picks among the
// READY endpoints of its color, by this policy, and goes to the base when
// none is ready, or fails with codes.Unavailable when colors.strict is
// set; an uncolored call picks among the base only, and fails with
// Unavailable when no base endpoint is READY. A drained endpoint (weight
// 0) counts as not ready for this. With a canary (registry.Canary, set by
// "muster canary user blue 5" and followed by resolver.WithCanaries) that
// share of the uncolored calls goes to the canary's color instead, drawn
// at random, or from a hash of the call's color.WithKey key so that a key
// always gets the same version. With no colored endpoint READY and
// colors.strict unset the policy's picker is used as is; otherwise the
// routing costs a context lookup and a map lookup per pick (figures in
// docs/RELEASES.md) and allocates nothing. See docs/RELEASES.md.
//
// # Affinity
//
// With a service call policy that sets affinityHeader (such as x-user),
// a call carrying a key (color.WithKey's, else the header's value) goes to
// the endpoint that weighted rendezvous hashing chooses for the key among
// its color group's READY endpoints that are not ejected, whatever their
// locality: the same endpoint from every client, a key moving only when
// its endpoint leaves, is ejected or drained, each endpoint taking a share
// of the keys proportional to its weight. Calls without a key are picked
// as without affinity, at one metadata lookup more. A keyed pick costs a
// logarithm per endpoint (about 300 ns over 5, 1.8 µs over 50; see
// docs/BENCHMARKS.md); keyed calls count toward ejection.
//
// # Locality
//
// With the client's zone or region known, the endpoints of each group (the
// base, each color) are split in levels (the client's zone, the rest of
// its region, everything else) and each call draws its level by the
// levels' health, exactly as muster_p2c does (see its package
// documentation, "Locality": Envoy's priority load rule with the
// overprovisioning factor locality.overprovisioningFactor, 1.4 by
// default); the weighted round robin then runs within the level.
//
// # Slow start
//
// With "slowStart" in the config (off by default), an endpoint whose
// Muster instance registered less than slowStart.window ago gets a ramped
// share of its weight, Envoy's slow_start_config formula:
// weight × max(minWeightPercent/100, (age/window)^(1/aggression)). The
// age counts from the instance's registration time as the registry keeps
// it (registry.Instance.RegisteredAt), not from when this client first
// saw it: a client that starts or restarts gives instances older than the
// window their full share at once, and ramps younger ones from where
// they are. A registration time ahead of the client's clock counts as age
// 0. While an endpoint ramps the picker is rebuilt every window/50
// (between 100 ms and 1 s) with the weights of the moment. Endpoints
// without a Muster instance (another resolver's, gRPC's xDS support's)
// are not ramped.
// For muster_wrr the ramped weights make the sequence, which follows them
// exactly: measured with a 10 s linear ramp from 10 %, a new backend beside
// two old ones got 5.4 % of the calls in its first 2 s (4.8..9 % by the
// formula) and 19.6 % 4..6 s in (17..23 %); without slow start, 33 %.
// For a p99 to hold during a rolling deploy, a cold backend must take less
// than 1 % of the calls while it is cold: choose a window longer than the
// cold period and a ramp that starts low (e.g. window 20s, aggression 0.5,
// minWeightPercent 0; docs/BENCHMARKS.md, "Rolling deploy").
//
// # Config
//
// All fields are optional:
//
//	{"muster_wrr": {
//	  "outlier": {
//	    "consecutiveFailures": 5,
//	    "baseEjectionTime": "30s",
//	    "maxEjectionTime": "300s",
//	    "maxEjectionPercent": 50
//	  },
//	  "endpointWeights": {"10.0.0.7:9000": 200, "10.0.0.8:9000": 50},
//	  "colors": {"key": "color", "strict": false},
//	  "locality": {"overprovisioningFactor": 1.4},
//	  "slowStart": {"window": "30s", "aggression": 1, "minWeightPercent": 10}
//	}}
//
// Durations use Go's syntax ("30s", "1.5s", "250ms") and must be positive.
// consecutiveFailures must be 0 or more (0 disables ejection),
// maxEjectionPercent 0..100 (0 disables ejection), and maxEjectionTime at
// least baseEjectionTime. slowStart.window is needed when slowStart is
// given, up to 1h; aggression 0.1..10 (1 by default: linear),
// minWeightPercent 0..100 (10 by default). endpointWeights maps an endpoint's address, as
// its resolver gives it (host:port), to its weight, 1..registry.MaxWeight
// (10000); it applies only to endpoints that carry no Muster instance, and
// an address it leaves out weighs 100. colors.key is the instance metadata
// key of an endpoint's color (at most 128 bytes; "" turns routing off, as
// for a channel already filtered to one color with ?meta.color=blue). A new config with another table
// takes effect at once: the next picker follows the new weights. An unknown field, a wrong type or an invalid
// value fails the service config with an error that starts with
// "muster_wrr: " and names the field, e.g.
//
//	muster_wrr: outlier.consecutiveFailures: -1 is negative; want 0 (no ejection) or more
//	muster_wrr: invalid config: json: unknown field "weights"
//	muster_wrr: endpointWeights: "10.0.0.7:9000": weight 0 is out of range 1..10000
//	muster_wrr: colors: json: unknown field "color"
//	muster_wrr: slowStart.minWeightPercent: 150 is out of range 0..100
package wrr
