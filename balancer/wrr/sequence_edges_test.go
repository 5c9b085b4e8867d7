package wrr

import "testing"

// Weights scaled down to fit maxPeriod keep their proportions, also when
// they differ widely (TestLargeWeightsAreScaledDown's are nearly equal,
// which a scaling that made every weight 1 would pass; docs/MUTATION.md).
func TestScaledDownWeightsKeepTheirProportions(t *testing.T) {
	weights := []int{10000, 5003, 2501, 1} // gcd 1, sum 17505 > maxPeriod
	seq := sequence(weights)
	count := make([]int, len(weights))
	for _, i := range seq {
		count[i]++
	}
	if len(seq) > maxPeriod {
		t.Fatalf("period %d, want at most %d", len(seq), maxPeriod)
	}
	for i := range 3 {
		want := float64(weights[i]) / float64(weights[0])
		got := float64(count[i]) / float64(count[0])
		if got < want*0.99 || got > want*1.01 {
			t.Fatalf("weights %v: counts %v over one period; endpoint %d has %.4f of endpoint 0's, want %.4f ±1%%", weights, count, i, got, want)
		}
	}
	if count[3] != 1 {
		t.Fatalf("weights %v: the weight-1 endpoint picked %d times in a period, want once (kept at least 1)", weights, count[3])
	}
}
