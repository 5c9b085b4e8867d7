// Package ratelimit is a token bucket for what clients can make a server
// do without end: log a warning, check a password. A Bucket allows a burst,
// then one every interval, and counts what it held back so that the next
// allowed call can say how many it follows.
//
// A Bucket is safe for concurrent use.
package ratelimit

import (
	"sync"
	"time"
)

// Bucket allows Burst calls at once and then one every Every. The zero
// Bucket allows nothing; set both fields before the first call and do not
// change them after.
type Bucket struct {
	Burst int
	Every time.Duration

	mu     sync.Mutex
	tokens float64
	last   time.Time
	held   int
}

// Allow reports whether a call at now may go ahead and, if it may, how
// many calls were held back since the last one that went ahead.
func (b *Bucket) Allow(now time.Time) (ok bool, held int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens = float64(b.Burst)
	} else if b.Every > 0 {
		b.tokens = min(float64(b.Burst), b.tokens+float64(now.Sub(b.last))/float64(b.Every))
	}
	b.last = now
	if b.tokens < 1 {
		b.held++
		return false, 0
	}
	b.tokens--
	held, b.held = b.held, 0
	return true, held
}
