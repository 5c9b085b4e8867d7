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
// A "muster:///" channel of package resolver runs muster_p2c by default,
// and that package registers both policies, so it needs neither this import
// nor a service config (go doc ./resolver, "Balancing").
//
// It works with any resolver. What the policy shares with muster_wrr
// (weights, outlier ejection, health checking, colors and canaries,
// circuit breaking, affinity, locality, slow start, the config's common
// fields and its errors) is described once, in docs/BALANCERS.md; this
// documentation gives what is muster_p2c's own.
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
// it is tried again. Failures and successes are as in docs/BALANCERS.md
// ("Outcomes"). A call the caller canceled only tells that its latency was
// at least that long: it can raise the cost, never lower it, and counts
// neither way for ejection.
//
// A new endpoint starts from the median cost of the endpoints that have
// one, so it is neither flooded (as it would be from zero) nor starved.
// When no endpoint has a cost yet (a new channel), an endpoint without one
// takes a single call at a time until its first call completes.
//
// Weights divide the score: an endpoint of twice the weight is preferred
// until its cost × calls in flight is twice as high. They bias the choice
// rather than fix shares (muster_wrr does that). Weight 0 (a draining
// instance) is as in docs/BALANCERS.md ("Weights").
//
// # Stats
//
// The balancer keeps each endpoint's cost, in-flight count, success count
// and ejection state per address (endpoint), for as long as it is in the
// resolver state and for a retention time after it leaves it
// (docs/BALANCERS.md, "Outlier ejection and health checking"). Pickers, which gRPC rebuilds on every
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
// # Outlier ejection, colors, circuit breaking, affinity, locality
//
// These are as in docs/BALANCERS.md: an ejected endpoint is left out of
// the draw until its probe, a color group or locality level is picked
// within by the draw above, and a group none of whose endpoints is
// admissible passes the pick on. What is muster_p2c's own:
//
// The cost of a failure already steers calls away from a failing endpoint
// after a few of them, so with the default decayTime a failing endpoint
// may get too few calls in a window to be judged by failure percentage: it
// is then avoided by its cost, not ejected, and comes back as its cost
// decays.
//
// Keyed calls (affinity) count toward ejection but are not timed: they
// teach the policy no latency.
//
// # Slow start
//
// With "slowStart" in the config (docs/BALANCERS.md, "Slow start") the
// ramp scales the endpoint's weight in the cost it compares; as picking
// compares two endpoints' costs, an endpoint at a tenth of the others'
// weight wins almost no comparison until its weight catches up, so it gets
// less than the formula's share early in its ramp: measured with a 10 s
// linear ramp from 10 %, a new backend beside two old ones got 0.04 % of
// the calls in its first 2 s and 25 % 4..6 s in (muster_wrr, which follows
// weights exactly: 5.4 % and 19.6 %; without slow start: 36 %).
//
// # Config
//
// All fields are optional. muster_p2c's own is decayTime, the time
// constant of the cost's decay (DefaultDecayTime, 10s; a positive
// duration in Go's syntax); the others are muster_wrr's too
// (docs/BALANCERS.md, "Config"):
//
//	{"muster_p2c": {
//	  "decayTime": "10s",
//	  "outlier": {"consecutiveFailures": 5, "baseEjectionTime": "30s"},
//	  "colors": {"key": "color"}
//	}}
//
// A new config takes effect at once, with the endpoints' latency and
// ejection state kept. An unknown field, a wrong type or an invalid value
// fails the service config with an error that starts with "muster_p2c: "
// and names the field, e.g.
//
//	muster_p2c: decayTime: "10" is not a duration; want e.g. "30s" or "250ms"
//	muster_p2c: invalid config: json: unknown field "decay"
//	muster_p2c: outlier.maxEjectionPercent: 150 is out of range 0..100
package p2c
