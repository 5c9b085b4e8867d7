// Package p2c provides the muster_p2c gRPC load balancing policy: power of
// two choices by a load score built from a time-decayed peak EWMA of each
// endpoint's latency and its calls in flight, divided by its weight.
//
// # Use
//
// Importing the package registers the policy with gRPC under Name (in
// init, grpc-go's only mechanism, as its own balancer/roundrobin does);
// select it in the service config:
//
//	import _ "github.com/musterhq/muster/balancer/p2c"
//
//	conn, err := grpc.NewClient("muster:///user",
//		grpc.WithResolvers(builder),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// It works with any resolver. Endpoints of the Muster resolver
// (github.com/musterhq/muster/resolver) carry their instance's weight;
// others weigh their first address's entry in the config's
// "endpointWeights" table, else registry.DefaultWeight (100). Under xDS
// (a Cluster naming muster_p2c, see github.com/musterhq/muster/xds),
// Muster's control plane writes that table from the registry, since
// grpc-go keeps the EDS endpoint weights where no other module can read
// them.
//
// # Picking
//
// Each pick draws two distinct endpoints at random among the READY ones
// and takes the one with the lower score
//
//	score = cost × (inFlight + 1) / weight
//
// where inFlight is the endpoint's calls picked and not yet done, and cost
// is its latency estimate, decayed to the time of the pick:
//
//	cost = ewma × exp(−(now − lastSample) / decayTime)
//
// ewma is updated on each completed call with latency rtt, dt after the
// previous sample: peak first, then an exponentially weighted moving
// average in time (as Finagle's and Linkerd's peak EWMA):
//
//	success, rtt ≥ ewma:  ewma = rtt
//	success, rtt < ewma:  ewma = ewma × w + rtt × (1 − w),  w = exp(−dt / decayTime)
//	failure:              ewma = min(2 × max(ewma, rtt), 60s)
//
// (Both decays are skipped, or taken as linear, when dt is below
// decayTime/1024, where they differ from the formulas by under 0.1%: an
// endpoint in steady use costs no exp.)
//
// So a slow response raises the score at once and is forgotten over about
// decayTime; a failure doubles it at once; and an endpoint that gets no
// calls (because its score is high) sees its cost decay towards zero until
// it is tried again. Failures are the codes Unavailable, DeadlineExceeded,
// ResourceExhausted, Internal, DataLoss, Unimplemented, and errors without
// a gRPC status (transport errors); other codes are the application's
// answers and count as successes. A call the caller canceled only tells
// that its latency was at least that long: it can raise the cost, never
// lower it, and counts neither way for ejection.
//
// A new endpoint starts from the median cost of the endpoints that have
// one, so it is neither flooded (as it would be from zero) nor starved.
// When no endpoint has a cost yet (a new channel), an endpoint without one
// takes a single call at a time until its first call completes.
//
// Weights divide the score: an endpoint of twice the weight is preferred
// until its cost × calls in flight is twice as high. They bias the choice
// rather than fix shares (muster_wrr does that). An endpoint of weight 0 (a
// draining instance) gets no new calls unless every READY endpoint has
// weight 0, in which case they share the calls as if equal.
//
// # Stats
//
// The balancer keeps each endpoint's cost, in-flight count, success count
// and ejection state per address (endpoint), for as long as it is in the resolver state
// and for a retention time (the longer of 5 minutes and the maximum
// ejection time) after it leaves it. Pickers, which gRPC rebuilds on every
// membership or connectivity change, hold pointers to these stats; so a
// reconnect or a new instance loses nothing.
//
// The pick path takes no lock and does not allocate.
//
// # Sampling
//
// Timing a call takes two clock reads, which cost more than the rest of a
// pick and its Done together; latency estimates need far fewer samples
// than a busy channel makes calls. So while a channel's calls come more
// than about 10µs apart (below about 100,000 calls a second), every call is
// timed; above that, a random one in k is, k a power of two up to 64
// adapted at each timed call so that timed calls stay 10–40µs apart. A
// timed call adds its weight k to its endpoint's in-flight count at the
// pick and removes it at Done, and adds k to the endpoint's successes: the
// in-flight count and the calls metric are then unbiased estimates
// (Horvitz–Thompson), exact while every call is timed, and within about
// √(k/count) of the truth above. Probes and calls to an endpoint without a
// cost yet are always timed, with weight 1.
//
// An untimed call costs one random number and a few atomic loads at the
// pick, and nothing at Done unless it failed: a failure, timed or not,
// doubles the endpoint's cost and counts toward ejection at once. Untimed
// picks decay costs to the time of the last timed pick (a coarse clock,
// tens of µs behind on a busy channel); ejections end on the real clock. When the calls all but stop, the first timed call after the gap
// resets k to 1. A timed call takes a record (endpoint, start time,
// weight) from a sync.Pool, which its Done callback returns. gRPC calls
// Done exactly once per pick, as the record's reuse requires.
//
// # Outlier ejection and health checking
//
// consecutiveFailures failed calls in a row (default 5) eject an endpoint
// for baseEjectionTime × the number of ejections in a row (default 30s,
// capped at maxEjectionTime, default 300s). At most maxEjectionPercent of
// the READY endpoints (default 50%, rounded down, at least one) are ejected
// at once, and never all. When an ejection ends, one call (the probe) is
// let through: its success ends the ejection, its failure starts the next,
// longer one. The count of ejections in a row starts over after an
// endpoint stays healthy for maxEjectionTime.
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
// The cost of a failure already steers calls away from a failing
// endpoint after a few of them, so with the default decayTime a failing
// endpoint may get too few calls in a window to be judged: it is then
// avoided by its cost, not ejected, and comes back as its cost decays.
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
// # Circuit breaking
//
// With a service call policy that sets maxConcurrent (registry.Policy,
// followed by resolver.WithPolicies), at most that many calls are in
// flight on the channel; a pick over it fails at once with
// codes.Unavailable naming the limit. A call counts from its pick to its
// Done, across pickers; an admitted pick then allocates its Done callback.
// muster_wrr does the same.
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
// docs/BENCHMARKS.md); keyed calls count toward ejection but are not timed (they teach the policy no latency).
//
// # Locality
//
// When the client's zone or region is known (resolver.WithZone,
// resolver.WithRegion, or the target's zone= and region=, with the zone
// fallback on, the default), the Muster resolver hands every instance with
// the client's locality (resolver.LocalityOf), and each group of
// endpoints (the base, each color) is split in three levels by
// registry.Near: the client's zone, the other zones of its region,
// everything else. A level's healthy fraction h is the weight of its
// endpoints that are READY and not ejected (or whose ejection time is
// over, so that they get their probe), plus those still connecting for
// the first time, over the weight of all its listed endpoints, a draining
// endpoint counting registry.DefaultWeight and none of it healthy. The
// levels share the calls by Envoy's priority load rule, with the
// overprovisioning factor f (locality.overprovisioningFactor, 1.4 by
// default, 1..10): the nearest level takes min(1, f·h) of the calls, the
// next min(1, f·h) of what is left, and so on; when the levels' min(1,
// f·h) sum to s < 1 they are first scaled by 1/s, so that they share every
// call in proportion to their health. Each call draws its level at random
// by those shares, then the policy picks within the level as above. With
// every level healthy all calls stay in the client's zone; a zone at
// h = 1/3 keeps 46.7 % and spills the rest to its region.
//
// The healthy fractions are recomputed every 50 ms on the pick path (an
// ejection changes them between pickers) and smoothed: a fall takes
// effect at once, a rise approaches the new value with a 500 ms time
// constant, so that an endpoint that flaps holds its level's share near
// the lower value instead of swinging the traffic. A level-split pick
// costs a clock read and a random number more than the policy's own; a
// group whose endpoints are all in one level uses the policy's picker as
// is. Without a known locality, picking is as above. With
// resolver.WithZoneFallback(false) the resolver keeps only the zone's (or
// region's) instances and there is nothing to spill to.
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
// For muster_p2c the ramp scales the endpoint's weight in the cost it
// compares; as picking compares two endpoints' costs, an endpoint at a
// tenth of the others' weight wins almost no comparison until its
// weight catches up, so it gets less than the formula's share early in
// its ramp: measured with a 10 s linear ramp from 10 %, a new backend
// beside two old ones got 0.04 % of the calls in its first 2 s and 25 %
// 4..6 s in (muster_wrr, which follows weights exactly: 5.4 % and 19.6 %;
// without slow start: 36 %).
//
// # Config
//
// All fields are optional:
//
//	{"muster_p2c": {
//	  "decayTime": "10s",
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
// takes effect at once, with the endpoints' latency and ejection state
// kept. An unknown field, a wrong type or an invalid
// value fails the service config with an error that starts with
// "muster_p2c: " and names the field, e.g.
//
//	muster_p2c: outlier.maxEjectionPercent: 150 is out of range 0..100
//	muster_p2c: decayTime: "10" is not a duration; want e.g. "30s" or "250ms"
//	muster_p2c: invalid config: json: unknown field "decay"
//	muster_p2c: endpointWeights: "10.0.0.7:9000": weight 0 is out of range 1..10000
//	muster_p2c: colors: json: unknown field "color"
//	muster_p2c: locality.overprovisioningFactor: 0.5 is out of range 1..10
//	muster_p2c: slowStart.window: missing; want a duration up to 1h0m0s, e.g. "30s"
package p2c
