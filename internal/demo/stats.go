package demo

import (
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

// row is one backend's line of the live table.
type row struct {
	calls    int
	p50, p99 time.Duration
}

// second returns each backend's calls and latencies since the last call,
// and the totals so far.
func (s *stats) second() (rows map[string]row, total, failures int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows = map[string]row{}
	for b, lat := range s.window {
		slices.Sort(lat)
		rows[b] = row{calls: len(lat), p50: lat[len(lat)/2], p99: lat[(len(lat)-1)*99/100]}
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
