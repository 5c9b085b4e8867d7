package ratelimit

import (
	"testing"
	"time"
)

// A burst, then one an interval; what was held back is said by the next
// call allowed.
func TestBucket(t *testing.T) {
	b := &Bucket{Burst: 3, Every: time.Second}
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, held := b.Allow(now); !ok || held != 0 {
			t.Fatalf("call %d of the burst: %v, %d held; want allowed", i+1, ok, held)
		}
	}
	for range 5 {
		if ok, _ := b.Allow(now.Add(100 * time.Millisecond)); ok {
			t.Fatal("a call past the burst within the interval was allowed")
		}
	}
	if ok, held := b.Allow(now.Add(1100 * time.Millisecond)); !ok || held != 5 {
		t.Fatalf("a call an interval later: %v, %d held; want allowed after 5 held", ok, held)
	}
	if ok, _ := b.Allow(now.Add(1200 * time.Millisecond)); ok {
		t.Fatal("two calls within one interval after the burst were allowed")
	}
	// Idle time refills up to the burst, not beyond.
	later := now.Add(time.Hour)
	for i := range 3 {
		if ok, _ := b.Allow(later); !ok {
			t.Fatalf("call %d after an hour: held", i+1)
		}
	}
	if ok, _ := b.Allow(later); ok {
		t.Fatal("a fourth call after an hour was allowed: the burst grew")
	}
}
