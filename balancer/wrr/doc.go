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
// A "muster:///" channel of package resolver selects it with the target's
// lb=wrr or resolver.WithBalancer(Name) as well (go doc ./resolver,
// "Balancing").
//
// It works with any resolver. What the policy shares with muster_p2c
// (weights, outlier ejection, health checking, colors and canaries,
// circuit breaking, affinity, locality, slow start, the config's common
// fields and its errors) is described once, in docs/BALANCERS.md; this
// documentation gives what is muster_wrr's own. Without an
// "endpointWeights" table, endpoints of other resolvers than Muster's all
// weigh registry.DefaultWeight, which makes the policy a plain round robin.
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
// # Outlier ejection, colors, circuit breaking, affinity, locality
//
// These are as in docs/BALANCERS.md; the weighted round robin runs within
// a color group or locality level. What is muster_wrr's own: a pick whose
// turn falls on an ejected endpoint goes to the endpoint of another turn
// of the sequence, drawn by hashing the turn, so that the ejected
// endpoint's share is spread over the others in proportion to their
// weights; when none of them is admissible, the pick passes on.
//
// # Slow start
//
// With "slowStart" in the config (docs/BALANCERS.md, "Slow start") the
// ramped weights make the sequence, which follows them exactly: measured
// with a 10 s linear ramp from 10 %, a new backend beside two old ones got
// 5.4 % of the calls in its first 2 s (4.8..9 % by the formula) and 19.6 %
// 4..6 s in (17..23 %); without slow start, 33 %. For a p99 to hold during
// a rolling deploy, a cold backend must take less than 1 % of the calls
// while it is cold: choose a window longer than the cold period and a ramp
// that starts low (e.g. window 20s, aggression 0.5, minWeightPercent 0;
// docs/BENCHMARKS.md, "Rolling deploy").
//
// # Config
//
// All fields are optional; they are muster_p2c's too, save its decayTime
// (docs/BALANCERS.md, "Config"):
//
//	{"muster_wrr": {
//	  "outlier": {"consecutiveFailures": 5, "baseEjectionTime": "30s"},
//	  "endpointWeights": {"10.0.0.7:9000": 200, "10.0.0.8:9000": 50}
//	}}
//
// A new config with another table takes effect at once: the next picker
// follows the new weights. An unknown field, a wrong type or an invalid
// value fails the service config with an error that starts with
// "muster_wrr: " and names the field, e.g.
//
//	muster_wrr: outlier.consecutiveFailures: -1 is negative; want 0 (no ejection) or more
//	muster_wrr: invalid config: json: unknown field "weights"
package wrr
