// Package etcdtest runs real embedded etcd servers for tests, with a
// fault-injection proxy in front of every member's client port.
//
// Start launches a single member (the default) or a three-member cluster
// (WithSize(3)) inside the test process, on free loopback ports and temporary
// data directories, with short raft timeouts and no logging. It returns once
// every member is ready, a leader exists and every member serves a
// linearizable read, and it registers Cluster.Close with t.Cleanup.
//
// Each member's client port sits behind a TCP proxy (go.etcd.io/etcd/pkg/v3/proxy).
// Cluster.Endpoints and Cluster.Client go through the proxies, so a test can
// cut a client off (Member.Blackhole), slow it down (Member.Delay) or take the
// server away (Member.Stop, Member.Kill) and bring it back (Member.Restart,
// which keeps the data directory and the ports). Members advertise the proxy
// URLs as their client URLs, so a client that syncs its endpoints from the
// member list stays behind the proxies. Cluster.DirectEndpoints bypasses them.
// Raft traffic between members does not go through the proxies (it goes
// through an internal forwarder that cuts a member's connections when it
// stops, as the death of its process would).
//
// A typical test:
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
//	}
//
//	func TestSomething(t *testing.T) {
//		c := etcdtest.Start(t)
//		cli := c.Client(t)
//		if _, err := cli.Put(ctx, "k", "v"); err != nil { ... }
//		c.Members()[0].Blackhole() // cli's requests now time out
//		...
//	}
//
// # TLS and authentication
//
// WithTLS generates a CA, a server certificate for the loopback addresses and
// a client certificate for the cluster (Cluster.TLS gives their PEM files and
// a client *tls.Config); members then serve clients over TLS only, require a
// client certificate, and Endpoints start with "https://". The proxies
// forward TCP, so TLS runs end to end and the faults above work unchanged.
// GenerateTLS makes another, unrelated set: its CA is a wrong CA for the
// cluster.
//
// WithAuth(password, ttl) creates the user RootUser with the root role and
// enables authentication, with etcd's simple tokens expiring ttl after their
// last use. Cluster.Client and Cluster.ClientConfig log in as RootUser (and
// present the client certificate WithTLS); Cluster.UserClient logs in as
// another user, created by the test with the usual etcd calls (RoleAdd,
// RoleGrantPermission, UserAdd, UserGrantRole).
//
// Cluster.RPCStats counts the requests the cluster's members served, by
// method and by error message: logins, requests refused for an expired
// token, watches refused, so a test can bound retries.
//
// # Leak checks
//
// Cluster.Close, which Start registers with t.Cleanup, stops everything the
// cluster started, so goleak finds nothing once it has run. LeakOptions
// returns the options to pass to goleak for the rest. A per-test check must
// run after the cleanups, so register it before calling Start:
//
//	t.Cleanup(func() { goleak.VerifyNone(t, etcdtest.LeakOptions()...) })
//	c := etcdtest.Start(t)
//
// (defer goleak.VerifyNone(...) would run before the cluster is closed.)
//
// # Concurrency
//
// All methods are safe for concurrent use. Methods that take a testing.TB
// report failures with t.Fatalf, so like t.Fatalf they must be called from the
// goroutine running the test. Stop, Kill and Restart of one member are
// serialised with each other.
//
// # Global state
//
// The embedded servers share process-wide state, notably the Prometheus
// default registry (see WatcherCount). Tests that compare metrics should
// compare deltas and should not run in parallel with other etcd tests.
package etcdtest
