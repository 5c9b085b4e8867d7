package lb

import (
	"math"
	"testing"
)

// Spill follows Envoy's priority load: a level of healthy fraction h keeps
// min(1, f·h) of what reaches it; when the levels cannot take every call
// between them, they share in proportion to their health.
func TestSpill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health [levels]float64
		f      float64
		want   [levels]float64
		ok     bool
	}{
		{"all healthy: all in the zone", [levels]float64{1, 1, 1}, 1.4, [levels]float64{1, 0, 0}, true},
		{"the zone at 3/4 keeps all (1.4 · 0.75 ≥ 1)", [levels]float64{0.75, 1, 1}, 1.4, [levels]float64{1, 0, 0}, true},
		{"the zone at 1/3 spills to the region", [levels]float64{1.0 / 3, 1, 1}, 1.4, [levels]float64{1.4 / 3, 1 - 1.4/3, 0}, true},
		{"zone and region degraded: on to elsewhere", [levels]float64{0.25, 0.25, 1}, 1.4, [levels]float64{0.35, 0.35, 0.3}, true},
		{"factor 1: spill as soon as unhealthy", [levels]float64{0.9, 1, 0}, 1, [levels]float64{0.9, 0.1, 0}, true},
		{"no zone (empty level): the region", [levels]float64{0, 1, 1}, 1.4, [levels]float64{0, 1, 0}, true},
		{"all degraded: shares by health", [levels]float64{0.2, 0.1, 0}, 1.4, [levels]float64{2.0 / 3, 1.0 / 3, 0}, true},
		{"nothing healthy", [levels]float64{0, 0, 0}, 1.4, [levels]float64{0, 0, 0}, false},
	} {
		got, ok := Spill(tc.health, tc.f)
		sum := 0.0
		for i := range got {
			sum += got[i]
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: Spill(%v, %v) = %v, want %v", tc.name, tc.health, tc.f, got, tc.want)
				break
			}
		}
		if ok != tc.ok || ok && math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: ok %v (want %v), shares sum to %v", tc.name, ok, tc.ok, sum)
		}
	}
}

// A fall of the healthy fraction takes effect at once; a rise approaches
// the new value with the time constant riseTime.
func TestSmooth(t *testing.T) {
	if got := smooth(1, 0.2, 1); got != 0.2 {
		t.Errorf("a fall: %v, want 0.2 at once", got)
	}
	if got := smooth(0, 1, riseTime); math.Abs(got-(1-math.Exp(-1))) > 1e-9 {
		t.Errorf("a rise after one time constant: %v, want 1-1/e", got)
	}
	if got := smooth(0.5, 1, 0); got != 0.5 {
		t.Errorf("a rise with no time passed: %v, want 0.5", got)
	}
	// One endpoint of three flapping every 100 ms (0.67 ↔ 1) holds the
	// level near 0.67, where it falls, instead of swinging it.
	h, hi := 1.0, 0.0
	for i := range 40 {
		raw := 1.0
		if i%2 == 0 {
			raw = 2.0 / 3
		}
		h = smooth(h, raw, 100_000_000)
		if i > 10 && raw == 1 {
			hi = max(hi, h)
		}
	}
	if hi > 0.75 {
		t.Errorf("a flapping endpoint lifts its level to %v between flaps; want it near 0.67", hi)
	}
}

// FuzzSpill: shares are in 0..1, sum to 1 when ok, and a level never
// takes more than its overprovisioned health allows unless every level is
// short of it.
func FuzzSpill(f *testing.F) {
	f.Add(1.0, 1.0, 1.0, 1.4)
	f.Add(0.1, 0.0, 0.5, 1.0)
	f.Fuzz(func(t *testing.T, a, b, c, factor float64) {
		if math.IsNaN(a+b+c+factor) || factor < MinOverprovisioningFactor || factor > MaxOverprovisioningFactor {
			return
		}
		h := [levels]float64{math.Min(1, math.Abs(a)), math.Min(1, math.Abs(b)), math.Min(1, math.Abs(c))}
		for _, x := range h {
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return
			}
		}
		sh, ok := Spill(h, factor)
		sum, capped := 0.0, 0.0
		for i := range sh {
			if sh[i] < -1e-12 || sh[i] > 1+1e-12 {
				t.Fatalf("Spill(%v, %v) = %v: a share outside 0..1", h, factor, sh)
			}
			sum += sh[i]
			capped += math.Min(1, factor*h[i])
		}
		if ok && math.Abs(sum-1) > 1e-9 {
			t.Fatalf("Spill(%v, %v) = %v: sums to %v", h, factor, sh, sum)
		}
		if capped >= 1 {
			for i := range sh {
				if sh[i] > math.Min(1, factor*h[i])+1e-9 {
					t.Fatalf("Spill(%v, %v) = %v: level %d over its overprovisioned health", h, factor, sh, i)
				}
			}
		}
	})
}
