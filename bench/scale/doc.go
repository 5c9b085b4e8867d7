// Package scale holds the large-scale benchmarks of the registry and the
// resolver (docs/BENCHMARKS.md: "Large registries" and "Mass expiry at
// scale"). It has no code of its own: the benchmarks are its test files,
// and they run only with -bench, so `go test ./...` stays fast.
//
//	go test -run '^$' -bench LargeRegistry -benchtime 1x -count 3 ./bench/scale/
//	go test -run '^$' -bench MassExpiry -benchtime 1x -timeout 30m ./bench/scale/ -expiry.keys 50000
//
// etcd runs in a child process (the test binary itself), so that the heap
// measured in the benchmark process is the client's alone.
package scale
