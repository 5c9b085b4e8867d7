package wrr

import (
	"fmt"
	rand "math/rand/v2"
	"slices"
	"testing"
)

// nginx is nginx's smooth weighted round robin as written in
// ngx_http_upstream_get_peer, run for total steps.
func nginx(weights []int64, steps int) []uint32 {
	cur := make([]int64, len(weights))
	var total int64
	for _, w := range weights {
		total += w
	}
	out := make([]uint32, 0, steps)
	for range steps {
		best := -1
		for i, w := range weights {
			cur[i] += w
			if best < 0 || cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		out = append(out, uint32(best))
	}
	return out
}

func TestSequenceIsNginxSmoothWeightedRoundRobin(t *testing.T) {
	if got, want := fmt.Sprint(sequence([]int{5, 1, 1})), "[0 0 1 0 2 0 0]"; got != want {
		t.Fatalf("sequence(5, 1, 1) = %s, want %s (nginx's own example: a a b a c a a)", got, want)
	}
	if got, want := fmt.Sprint(sequence([]int{100, 100, 200})), "[2 0 1 2]"; got != want {
		t.Fatalf("sequence(100, 100, 200) = %s, want %s", got, want)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + r.IntN(12)
		weights := make([]int, n)
		for i := range weights {
			// Few distinct values, so that ties between equal weights
			// are exercised, and now and then a wide spread.
			if trial%3 == 0 {
				weights[i] = 1 + r.IntN(1000)
			} else {
				weights[i] = 100 * (1 + r.IntN(3))
			}
		}
		ws := reduce(weights)
		got := sequence(weights)
		want := nginx(ws, len(got))
		if !slices.Equal(got, want) {
			t.Fatalf("weights %v: sequence differs from nginx's\n got %v\nwant %v", weights, got, want)
		}
		// One period: every endpoint appears exactly its (reduced)
		// weight times.
		count := make([]int64, n)
		for _, i := range got {
			count[i]++
		}
		if !slices.Equal(count, ws) {
			t.Fatalf("weights %v: counts %v over one period, want %v", weights, count, ws)
		}
	}
}

func TestLargeWeightsAreScaledDown(t *testing.T) {
	weights := make([]int, 100)
	for i := range weights {
		weights[i] = 9901 + i // coprime-ish: a gcd of 1, a sum near 1e6
	}
	seq := sequence(weights)
	if len(seq) > maxPeriod+len(weights) {
		t.Fatalf("period %d, want at most about %d", len(seq), maxPeriod)
	}
	count := make([]int, len(weights))
	for _, i := range seq {
		count[i]++
	}
	for i := range weights {
		if count[i] == 0 {
			t.Fatalf("endpoint %d never picked", i)
		}
	}
	// Shares stay within 1% of the weights'.
	var sum int
	for _, w := range weights {
		sum += w
	}
	for i, w := range weights {
		want := float64(w) / float64(sum)
		got := float64(count[i]) / float64(len(seq))
		if got < want*0.99 || got > want*1.01 {
			t.Fatalf("endpoint %d: share %.5f, want %.5f ±1%%", i, got, want)
		}
	}
}

func BenchmarkSequence(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		weights := make([]int, n)
		for i := range weights {
			weights[i] = 100 * (1 + i%3)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				sequence(weights)
			}
		})
	}
}
