// Package wrr provides the muster_wrr gRPC load balancing policy: smooth
// weighted round robin (nginx's algorithm) over the READY endpoints, by
// the weight of each endpoint's registry instance.
//
// # Use
//
// Importing the package registers the policy with gRPC under Name; select
// it in the service config:
//
//	import _ "github.com/musterhq/muster/balancer/wrr"
//
//	conn, err := grpc.NewClient("muster:///user",
//		grpc.WithResolvers(builder),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_wrr":{}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// A "muster:///" channel of package resolver selects it with the target's
// lb=wrr or resolver.WithBalancer(Name) (go doc ./resolver, "Balancing").
//
// It works with any resolver. What the policy shares with muster_p2c
// (weights, outcomes, outlier ejection, health checking, colors and
// canaries, circuit breaking, affinity, locality, slow start, the config's
// common fields and its errors) is described once, in docs/BALANCERS.md;
// this documentation gives what is muster_wrr's own. Measurements are in
// docs/BENCHMARKS.md ("Balancers: pick cost and tail latency", "Slow start
// shares", "Rolling deploy"). Without an "endpointWeights" table,
// endpoints of other resolvers than Muster's all weigh
// registry.DefaultWeight, which makes the policy a plain round robin.
//
// # Order
//
// nginx's smooth weighted round robin gives every endpoint a current
// weight, initially 0; each pick adds each endpoint's weight to its
// current weight, takes the endpoint with the largest (the first one on a
// tie, in address order), and subtracts the total weight from the winner's.
// Weights 5, 1, 1 give a, a, b, a, c, a, a rather than a, a, a, a, a, b, c.
// The picker computes one period of that sequence when it is built and
// then only advances an atomic counter, starting at a random point so that
// clients do not move in step. The pick path takes no lock and does not
// allocate.
//
// # Ejection, slow start
//
// The weighted round robin runs within a color group or locality level. A
// pick whose turn falls on an ejected endpoint goes to the endpoint of
// another turn of the sequence, drawn by hashing the turn, so that the
// ejected endpoint's share is spread over the others in proportion to
// their weights; when none of them is admissible, the pick passes on. With
// slow start the ramped weights make the sequence, which follows them
// exactly; to keep cold backends out of the tail latency during a rolling
// deploy, start the ramp low (docs/BENCHMARKS.md, "Rolling deploy", has a
// setting that holds the p99).
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
// A new config takes effect at once: the next picker follows the new
// weights. An invalid config fails the service config with an error that
// starts with "muster_wrr: " and names the field, e.g.
//
//	muster_wrr: outlier.consecutiveFailures: -1 is negative; want 0 (no ejection) or more
package wrr
