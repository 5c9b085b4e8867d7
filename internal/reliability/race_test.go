//go:build race

package reliability_test

// raceEnabled: the race detector makes every call several times dearer in
// CPU, so call-rate floors are lower under it.
const raceEnabled = true
