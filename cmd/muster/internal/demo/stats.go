package demo

import (
	"math"
	"slices"
	"sync"
	"time"
)

// stats collects the client's calls: per backend for the live table, and
// per phase for the promises.
type stats struct {
	mu        sync.Mutex
	window    map[string][]time.Duration // latencies in the current second, per backend
	total     int
	failures  int
	phase     string
	perPhase  map[string]*phaseStats
	lastError error
}

type phaseStats struct {
	calls, failures int
	byBackend       map[string]int
}

func newStats() *stats {
	return &stats{window: map[string][]time.Duration{}, perPhase: map[string]*phaseStats{}}
}

func (s *stats) setPhase(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = p
	if s.perPhase[p] == nil {
		s.perPhase[p] = &phaseStats{byBackend: map[string]int{}}
	}
}

func (s *stats) record(backend string, took time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	ps := s.perPhase[s.phase]
	ps.calls++
	if err != nil {
		s.failures++
		ps.failures++
		s.lastError = err
		return
	}
	ps.byBackend[backend]++
	s.window[backend] = append(s.window[backend], took)
}

// minCallsForPercentiles is the fewest calls in a second for which the
// live table shows a backend's latency percentiles: below it, P99 is the
// slowest call and P50 one of a handful, figures that jump from second to
// second.
const minCallsForPercentiles = 20

// row is one backend's line of the live table.
type row struct {
	calls int
	// p50 and p99 are the latency percentiles of the second's calls
	// (nearest rank), 0 when there were fewer than
	// minCallsForPercentiles.
	p50, p99 time.Duration
}

// percentile returns the p-th percentile (0 < p <= 1) of sorted by the
// nearest-rank method: the smallest value with at least p of the values
// at or below it. It returns 0 for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// second returns each backend's calls and latencies since the last call,
// and the totals so far.
func (s *stats) second() (rows map[string]row, total, failures int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows = map[string]row{}
	for b, lat := range s.window {
		r := row{calls: len(lat)}
		if len(lat) >= minCallsForPercentiles {
			slices.Sort(lat)
			r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
		}
		rows[b] = r
	}
	s.window = map[string][]time.Duration{}
	return rows, s.total, s.failures
}

func (s *stats) phaseStats(p string) phaseStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.perPhase[p]
	if ps == nil {
		return phaseStats{byBackend: map[string]int{}}
	}
	cp := *ps
	cp.byBackend = map[string]int{}
	for k, v := range ps.byBackend {
		cp.byBackend[k] = v
	}
	return cp
}
