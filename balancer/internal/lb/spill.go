package lb

import (
	"math"

	"github.com/musterhq/muster/registry"
)

// levels is the number of locality levels: registry.SameZone,
// registry.SameRegion, registry.Elsewhere.
const levels = int(registry.Elsewhere) + 1

// Spill returns each level's share of the calls, nearest first, from the
// levels' healthy fractions (0..1; 0 for a level without endpoints), by
// Envoy's priority load rule with the overprovisioning factor f: a level
// of healthy fraction h takes min(1, f·h) of the calls not yet taken by
// the levels before it. When the levels' min(1, f·h) sum to less than 1,
// they are scaled up to sum to 1 first, so that every call has a level
// and the levels share in proportion to their health. ok is false when no
// level has a healthy endpoint.
func Spill(health [levels]float64, f float64) (shares [levels]float64, ok bool) {
	var capped [levels]float64
	total := 0.0
	for i, h := range health {
		capped[i] = math.Min(1, f*h)
		total += capped[i]
	}
	if total <= 0 {
		return shares, false
	}
	norm := math.Min(1, total)
	left := 1.0
	for i := range capped {
		shares[i] = math.Min(left, capped[i]/norm)
		left -= shares[i]
	}
	return shares, true
}

// Smoothing of the healthy fractions that Spill is fed: a fall takes
// effect at once (traffic leaves a degraded level without delay), a rise
// approaches the new value with the time constant riseTime, so that an
// endpoint that flaps between healthy and not holds its level near the
// lower value instead of swinging the traffic back and forth.
const riseTime = 500_000_000 // ns

// smooth returns the smoothed fraction after prev, dt nanoseconds later,
// for the new raw value.
func smooth(prev, raw float64, dt int64) float64 {
	if raw <= prev {
		return raw
	}
	if dt <= 0 {
		return prev
	}
	return prev + (raw-prev)*(1-math.Exp(-float64(dt)/riseTime))
}
