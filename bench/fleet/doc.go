// Package fleet holds the benchmark of a whole fleet under churn
// (docs/BENCHMARKS.md, "A fleet under churn"; docs/SCALE.md is the sizing
// model drawn from it). It has no code of its own: the benchmark is its
// test files, and it runs only with -bench, so `go test ./...` stays fast.
//
// Every part runs in its own process, the test binary re-executed, so
// that each one's CPU and memory can be read from /proc:
//
//   - etcd: one cluster of -fleet.members members (internal/testkit/etcdtest);
//   - registrar processes: -fleet.processes of them, each with its own etcd
//     client and one etcd.Registrar (one lease, TTL -fleet.ttl) holding
//     -fleet.instances instances, spread over -fleet.hosts child processes;
//   - a client process: -fleet.channels muster:/// channels (one Discovery,
//     the resolver, muster_p2c) and -fleet.naming etcd:/// channels of etcd's
//     naming resolver (go.etcd.io/etcd/client/v3/naming/resolver, one watch
//     per channel), following the first -fleet.followed services;
//   - a control plane: xds.Server (what `muster xds` runs), with
//     -fleet.streams ADS streams from Go clients in the benchmark process.
//
// The benchmark process drives the churn: -fleet.churn changes a second on
// the followed services (register a new instance, change its weight, drain
// it by an override, deregister it), and records when each change reached
// each channel and stream.
//
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 30m ./bench/fleet/
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 60m ./bench/fleet/ \
//		-fleet.processes 250,1000,2000,4000 -fleet.ttl 10s,3s -fleet.streams 100
//
// Lists in -fleet.processes and -fleet.ttl are swept, one sub-benchmark
// per combination, each on a new cluster.
package fleet
