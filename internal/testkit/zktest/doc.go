// Package zktest runs real ZooKeeper servers (Debian's zookeeper package,
// 3.8) as child processes for tests: a single server or an ensemble, on
// free loopback ports, with data directories and a generated zoo.cfg in
// t.TempDir(), the admin server disabled and short ticks.
//
// Each server's client port sits behind a small TCP proxy of this package
// (Server.Addr, Cluster.Addrs); Server.DirectAddr bypasses it. The faults
// are those networks and machines produce:
//
//   - Server.Stall: a partition between clients and the server. The proxy
//     forwards nothing and loses nothing; new connections are accepted and
//     held. Heal delivers what waited, in order.
//   - Server.Freeze / Thaw: SIGSTOP / SIGCONT of the server's process.
//   - Server.Kill: SIGKILL; Server.Restart starts the process again on the
//     same ports and data directory.
//
// When the zookeeper package is not installed, Start skips the test, or
// fails it when the environment variable CI is "true" (CI must run these
// tests). Every process and goroutine the package starts ends with the
// test (t.Cleanup).
package zktest
