// Package reliability holds Muster's fault suite: tests that run
// registrars, discoveries, resolvers and real gRPC backends against a real
// 3-member embedded etcd cluster while faults are injected (members stopped
// or killed, connections stalled as by a partition or reset as by a crash,
// delays, compactions, mass lease expiry), and check that no working
// service leaves its clients' reach and no wrong data stays in the
// registry. docs/RELIABILITY.md lists each fault, the promise, the
// test and the measured figure. The package has no code of its own.
package reliability
