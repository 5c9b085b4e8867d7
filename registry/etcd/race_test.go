//go:build race

package etcd_test

// raceEnabled: the race detector makes every etcd request of an in-process
// server several times slower, so tests that need volume do less of it.
const raceEnabled = true
