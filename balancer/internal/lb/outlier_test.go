package lb

import (
	"testing"
	"time"
)

func newDetector(t *testing.T, cfg OutlierConfig, n int) (*Detector, []*OutlierState) {
	t.Helper()
	d := &Detector{name: "test"}
	d.SetConfig(cfg)
	states := make([]*OutlierState, n)
	for i := range states {
		states[i] = &OutlierState{}
	}
	d.SetMembers(states)
	return d, states
}

func fail(d *Detector, s *OutlierState, n int, now int64) {
	for range n {
		d.Record(s, true, false, now)
	}
}

func TestEjectsAfterConsecutiveFailures(t *testing.T) {
	cfg := DefaultOutlierConfig()
	d, s := newDetector(t, cfg, 4)
	now := int64(time.Hour)
	fail(d, s[0], cfg.ConsecutiveFailures-1, now)
	d.Record(s[0], false, false, now) // a success starts the count over
	fail(d, s[0], cfg.ConsecutiveFailures-1, now)
	if s[0].Ejected() {
		t.Fatalf("ejected after %d failures, a success, %d failures", cfg.ConsecutiveFailures-1, cfg.ConsecutiveFailures-1)
	}
	fail(d, s[0], 1, now)
	if !s[0].Ejected() {
		t.Fatalf("not ejected after %d consecutive failures", cfg.ConsecutiveFailures)
	}
	if ok, _ := s[0].Admit(now + int64(cfg.BaseEjectionTime) - 1); ok {
		t.Fatal("admitted before the ejection ended")
	}
}

func TestEjectionTimesGrowAndAreCapped(t *testing.T) {
	cfg := OutlierConfig{ConsecutiveFailures: 2, BaseEjectionTime: time.Second, MaxEjectionTime: 3500 * time.Millisecond, MaxEjectionPercent: 50}
	d, s := newDetector(t, cfg, 2)
	now := int64(time.Hour)
	fail(d, s[0], 2, now)
	for k, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3500 * time.Millisecond, 3500 * time.Millisecond} {
		if ok, _ := s[0].Admit(now + int64(want) - 1); ok {
			t.Fatalf("ejection %d: admitted before %v", k+1, want)
		}
		now += int64(want)
		ok, probe := s[0].Admit(now)
		if !ok || !probe {
			t.Fatalf("ejection %d: Admit after %v = %v, %v; want the probe", k+1, want, ok, probe)
		}
		if ok, _ := s[0].Admit(now); ok {
			t.Fatalf("ejection %d: a second call admitted while the probe is out", k+1)
		}
		d.Record(s[0], true, true, now) // the probe fails: next ejection
	}
}

func TestSuccessfulProbeEndsTheEjectionAndOtherResultsAreIgnored(t *testing.T) {
	cfg := DefaultOutlierConfig()
	d, s := newDetector(t, cfg, 3)
	now := int64(time.Hour)
	fail(d, s[0], cfg.ConsecutiveFailures, now)
	d.Record(s[0], false, false, now) // a call from before the ejection
	if !s[0].Ejected() {
		t.Fatal("a non-probe success ended the ejection")
	}
	now += int64(cfg.BaseEjectionTime)
	if _, probe := s[0].Admit(now); !probe {
		t.Fatal("no probe after the ejection time")
	}
	s[0].ReleaseProbe() // never sent
	if _, probe := s[0].Admit(now); !probe {
		t.Fatal("a released probe was not handed out again")
	}
	d.Record(s[0], false, true, now)
	if s[0].Ejected() {
		t.Fatal("still ejected after a successful probe")
	}
	if ok, probe := s[0].Admit(now); !ok || probe {
		t.Fatalf("Admit after the ejection = %v, %v; want true, false", ok, probe)
	}

	// Soon after, the next ejection is the second in a row: twice as long.
	now += int64(time.Second)
	fail(d, s[0], cfg.ConsecutiveFailures, now)
	if ok, _ := s[0].Admit(now + int64(cfg.BaseEjectionTime)); ok {
		t.Fatal("second ejection in a row not longer than the first")
	}
	d.Record(s[0], false, true, now+int64(2*cfg.BaseEjectionTime))

	// After maxEjectionTime of health, the count starts over.
	now += int64(2*cfg.BaseEjectionTime + cfg.MaxEjectionTime + time.Second)
	fail(d, s[0], cfg.ConsecutiveFailures, now)
	if _, probe := s[0].Admit(now + int64(cfg.BaseEjectionTime)); !probe {
		t.Fatal("after a long healthy spell the ejection is not back to the base time")
	}
}

func TestAtMostTheConfiguredShareIsEjectedNeverAll(t *testing.T) {
	for _, tc := range []struct{ n, percent, want int }{
		{1, 50, 0}, {2, 50, 1}, {3, 50, 1}, {4, 50, 2}, {10, 50, 5},
		{2, 100, 1}, {10, 100, 9}, {5, 10, 1}, {20, 10, 2}, {5, 0, 0},
	} {
		if got := MaxEjected(tc.n, tc.percent); got != tc.want {
			t.Errorf("MaxEjected(%d, %d%%) = %d, want %d", tc.n, tc.percent, got, tc.want)
		}
		cfg := DefaultOutlierConfig()
		cfg.MaxEjectionPercent = tc.percent
		d, s := newDetector(t, cfg, tc.n)
		for _, st := range s {
			fail(d, st, cfg.ConsecutiveFailures, int64(time.Hour))
		}
		ejected := 0
		for _, st := range s {
			if st.Ejected() {
				ejected++
			}
		}
		if ejected != tc.want {
			t.Errorf("%d endpoints all failing, max %d%%: %d ejected, want %d", tc.n, tc.percent, ejected, tc.want)
		}
	}
}

func TestRefusedEjectionStartsTheCountOver(t *testing.T) {
	cfg := DefaultOutlierConfig()
	d, s := newDetector(t, cfg, 2) // one may be ejected
	now := int64(time.Hour)
	fail(d, s[0], cfg.ConsecutiveFailures, now)
	fail(d, s[1], cfg.ConsecutiveFailures, now) // refused: the cap
	if s[1].Ejected() {
		t.Fatal("both of two endpoints ejected")
	}
	d.Record(s[0], false, true, now+int64(cfg.BaseEjectionTime)) // s[0] is back
	fail(d, s[1], cfg.ConsecutiveFailures-1, now)
	if s[1].Ejected() {
		t.Fatal("ejected before a full count of failures after the refusal")
	}
	fail(d, s[1], 1, now)
	if !s[1].Ejected() {
		t.Fatal("not ejected once the cap allowed it")
	}
}

func TestDisabledEjection(t *testing.T) {
	for _, cfg := range []OutlierConfig{
		{ConsecutiveFailures: 0, BaseEjectionTime: time.Second, MaxEjectionTime: time.Second, MaxEjectionPercent: 50},
		{ConsecutiveFailures: 1, BaseEjectionTime: time.Second, MaxEjectionTime: time.Second, MaxEjectionPercent: 0},
	} {
		d, s := newDetector(t, cfg, 4)
		fail(d, s[0], 100, 1)
		if s[0].Ejected() {
			t.Errorf("ejected with %+v", cfg)
		}
	}
}
