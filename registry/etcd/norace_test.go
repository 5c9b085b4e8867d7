//go:build !race

package etcd_test

// raceEnabled is false without the race detector (see race_test.go).
const raceEnabled = false
