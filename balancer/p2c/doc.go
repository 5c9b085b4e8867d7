// Package p2c provides the muster_p2c gRPC load balancing policy: power of
// two choices by a load score built from a time-decayed peak EWMA of each
// endpoint's latency and its calls in flight, divided by its weight.
//
// # Use
//
// Importing the package registers the policy with gRPC under Name; select
// it in the service config:
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
// (weights, outcomes, outlier ejection, health checking, colors and
// canaries, circuit breaking, affinity, locality, slow start, the config's
// common fields and its errors) is described once, in docs/BALANCERS.md;
// this documentation gives what is muster_p2c's own. Measurements are in
// docs/BENCHMARKS.md ("Balancers: pick cost and tail latency", "Slow start
// shares").
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
// average in time (Finagle's and Linkerd's peak EWMA):
//
//	success, rtt ≥ ewma:  ewma = rtt
//	success, rtt < ewma:  ewma = ewma × w + rtt × (1 − w),  w = exp(−dt / decayTime)
//	failure:              ewma = min(2 × max(ewma, rtt), 60s)
//
// So a slow response raises the score at once and is forgotten over about
// decayTime; a failure doubles it; an endpoint that gets no calls sees its
// cost decay until it is tried again. A call the caller canceled can raise
// the cost, never lower it, and counts neither way for ejection. A new
// endpoint starts from the median cost of those that have one; while none
// has one, an endpoint without a cost takes one call at a time until its
// first call completes.
//
// Weights bias the choice rather than fix shares (muster_wrr fixes them):
// an endpoint of twice the weight is preferred until its cost × calls in
// flight is twice as high.
//
// An endpoint's statistics are kept as its ejection state is (across
// pickers and reconnects, and for a while after it leaves the resolver
// state: docs/BALANCERS.md). The pick path takes no lock and does not
// allocate. Above about 100,000 calls a second per channel, only a random
// share of the calls is timed; the in-flight counts and the calls metric
// are then unbiased estimates, and every failure still counts at once.
//
// # Ejection, affinity, slow start
//
// The cost of a failure steers calls away from a failing endpoint after a
// few of them, so it may get too few calls in a window to be judged by
// failure percentage: it is then avoided by its cost rather than ejected.
// Keyed calls (affinity) count toward ejection but are not timed. With
// slow start, the ramp scales the weight in the score; since a pick
// compares two scores, a ramping endpoint gets less than the ramp's share
// early in its window (muster_wrr follows the ramp exactly).
//
// # Config
//
// All fields are optional. muster_p2c's own is decayTime, the time
// constant of the cost's decay (DefaultDecayTime, 10s; a positive duration
// in Go's syntax); the others are muster_wrr's too (docs/BALANCERS.md,
// "Config"):
//
//	{"muster_p2c": {
//	  "decayTime": "10s",
//	  "outlier": {"consecutiveFailures": 5, "baseEjectionTime": "30s"},
//	  "colors": {"key": "color"}
//	}}
//
// A new config takes effect at once, with the endpoints' statistics kept.
// An invalid config fails the service config with an error that starts
// with "muster_p2c: " and names the field, e.g.
//
//	muster_p2c: decayTime: "10" is not a duration; want e.g. "30s" or "250ms"
package p2c
