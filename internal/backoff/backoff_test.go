package backoff

import (
	"testing"
	"time"
)

func TestNextDoublesToCapWithinJitterBounds(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		got := b.Next()
		if got < w/2 || got > w {
			t.Fatalf("attempt %d: delay %v outside [%v, %v]", i, got, w/2, w)
		}
	}
	b.Reset()
	if got := b.Next(); got > 100*time.Millisecond {
		t.Fatalf("after Reset: delay %v, want at most 100ms", got)
	}
}

func TestNextExtremesOfJitter(t *testing.T) {
	b := New(100*time.Millisecond, 400*time.Millisecond)
	b.jitter = func(int64) int64 { return 0 }
	if got := b.Next(); got != 50*time.Millisecond {
		t.Fatalf("lowest jitter: got %v, want 50ms", got)
	}
	b.jitter = func(n int64) int64 { return n - 1 }
	if got := b.Next(); got != 200*time.Millisecond {
		t.Fatalf("highest jitter: got %v, want 200ms", got)
	}
}

func TestNewClampsBadInput(t *testing.T) {
	b := New(0, -1)
	if b.min != 100*time.Millisecond || b.max != b.min {
		t.Fatalf("New(0,-1) = min %v max %v, want 100ms/100ms", b.min, b.max)
	}
}
