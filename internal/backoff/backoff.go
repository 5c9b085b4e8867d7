// Package backoff computes capped exponential retry delays with jitter.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff yields delays that double from Min up to Max, each drawn uniformly
// from [d/2, d] ("equal jitter") so that many clients retrying after the same
// outage spread out. The zero value is not usable; call New. A Backoff is not
// safe for concurrent use: each retry loop owns one.
type Backoff struct {
	min, max time.Duration
	next     time.Duration
	// jitter returns a value in [0, n); replaced in tests.
	jitter func(n int64) int64
}

// New returns a Backoff from min doubling to max. A non-positive min becomes
// 100ms; a max below min becomes min.
func New(min, max time.Duration) *Backoff {
	if min <= 0 {
		min = 100 * time.Millisecond
	}
	if max < min {
		max = min
	}
	return &Backoff{min: min, max: max, next: min, jitter: rand.Int64N}
}

// Next returns the delay before the next attempt and doubles the one after.
func (b *Backoff) Next() time.Duration {
	d := b.next
	if b.next < b.max {
		b.next *= 2
		if b.next > b.max {
			b.next = b.max
		}
	}
	half := int64(d / 2)
	return time.Duration(half + b.jitter(half+1))
}

// Reset starts the sequence again from Min, after a success.
func (b *Backoff) Reset() { b.next = b.min }
