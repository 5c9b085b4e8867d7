// Package etcdtest runs real embedded etcd servers for tests, with a
// fault-injection proxy in front of every member's client port.
//
// Start launches a single member (the default) or a three-member cluster
// (WithSize(3)) inside the test process (or as child processes,
// WithProcesses), on free loopback ports and temporary
// data directories, with short raft timeouts and no logging. It returns once
// every member is ready, a leader exists and every member serves a
// linearizable read, and it registers Cluster.Close with t.Cleanup.
//
// Each member's client port sits behind a small TCP proxy of this package.
// Cluster.Endpoints and Cluster.Client go through the proxies; members
// advertise the proxy URLs as their client URLs, so a client that syncs its
// endpoints from the member list stays behind the proxies.
// Cluster.DirectEndpoints bypasses them. Raft traffic between members does
// not go through these proxies (it goes through an internal forwarder that
// closes a member's connections when it stops, as the death of its process
// would).
//
// # Faults
//
// The faults are those networks and machines produce; none discards bytes
// inside a connection that stays open (which no network does, and which can
// make a broken client look healthy):
//
//   - Member.Stall: a partition. The proxy forwards nothing in either
//     direction and loses nothing: bytes wait in the proxy or in the kernel's
//     buffers and are delivered in order after Heal, so a request issued
//     during the stall completes afterwards on the same connection. New
//     connections are accepted but nothing reaches the member.
//   - Member.Reset: a crash or a firewall that rejects. Every connection
//     through the proxy gets a TCP RST, and so does every new one as soon
//     as it is accepted, until Heal: clients fail at once, not by timeout.
//   - Member.Delay(d): a slow link. Every chunk arrives d late, in order, in
//     both directions.
//   - Member.Heal ends all three.
//
// The server itself can be stopped (Member.Stop, gracefully), killed
// (Member.Kill) and restarted (Member.Restart, same data directory and
// ports); while it is down, new connections through its proxy are reset.
//
// # Process members
//
// With WithProcesses each member runs in a child process (the test binary
// itself, re-executed; every TestMain of such a package calls
// RunMemberIfChild first), so that Member.Freeze stops it with SIGSTOP (its
// connections stay open and nothing answers, while the other members go
// on), Member.Thaw resumes it with SIGCONT, Member.Kill sends SIGKILL and
// Member.Stop SIGTERM; Member.Pid gives the child's process ID (to read its
// CPU and memory). Children die with the test process. Member.Etcd and
// Cluster.RPCStats need in-process members and panic otherwise.
// WithBinary runs another etcd server binary (the versions people deploy)
// the same way.
//
// # Identities and rewinds
//
// Member.ID is the etcd member ID, as in response headers' MemberId;
// Cluster.MemberByID finds the member that served a response. Rewinds of
// etcd's history: Cluster.Backup and Cluster.Restore put a single member
// back to an older copy of its data (revisions go back, the cluster ID
// stays), and Cluster.Wipe restarts any cluster empty, as a new cluster
// on the same ports.
//
// A typical test:
//
//	func TestMain(m *testing.M) {
//		etcdtest.RunMemberIfChild() // only needed with WithProcesses
//		goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
//	}
//
//	func TestSomething(t *testing.T) {
//		c := etcdtest.Start(t)
//		cli := c.Client(t)
//		if _, err := cli.Put(ctx, "k", "v"); err != nil { ... }
//		m := c.Members()[0]
//		m.Stall() // cli's requests now hang
//		...
//		m.Heal() // and complete
//	}
//
// # TLS and authentication
//
// WithTLS serves clients over TLS only, with certificates generated for
// the cluster; the proxies forward TCP, so TLS runs end to end and the
// faults above work unchanged. WithAuth enables authentication with the
// user RootUser, as whom Cluster.Client and Cluster.ClientConfig log in;
// Cluster.UserClient logs in as a user the test creates.
//
// Cluster.RPCStats counts the requests the cluster's members served, by
// method and by error message: logins, requests refused for an expired
// token, watches refused, so a test can bound retries.
//
// # Leak checks
//
// Cluster.Close, which Start registers with t.Cleanup, stops everything the
// cluster started (child processes are killed and reaped), so goleak finds
// nothing once it has run. LeakOptions
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
// goroutine running the test. Stop, Kill, Restart, Freeze and Thaw of one
// member, and Backup, Restore and Wipe, are serialised with each other.
//
// # Global state
//
// The embedded servers share process-wide state, notably the Prometheus
// default registry (see WatcherCount). Tests that compare metrics should
// compare deltas and should not run in parallel with other etcd tests.
package etcdtest
