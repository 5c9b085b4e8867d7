// Package balancersuite has the behaviour every Muster balancer shares,
// as tests each balancer's package runs with its policy name (colors,
// canaries, locality, call policies, slow start), and the registry they
// run against: real etcd behind the Muster resolver. It is apart from
// balancertest because the resolver imports the balancers: a balancer's
// own (internal) tests may use balancertest, and run these suites from
// its external test package.
package balancersuite
