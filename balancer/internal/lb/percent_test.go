package lb

import (
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// percentConfig ejects by failure percentage only (no consecutive
// failures), as a call policy of 50 % over 10 calls sets it.
func percentConfig() OutlierConfig {
	return OutlierConfig{MaxEjectionTime: DefaultMaxEjectionTime}.WithPolicy(registry.OutlierPolicy{
		FailurePercent: 50, MinRequests: 10, BaseEjection: 2 * time.Second, MaxEjectedPercent: 50,
	})
}

// calls records n calls to s at now, the first failed of them failing.
func calls(d *Detector, s *OutlierState, n, failed int, now int64) {
	for i := range n {
		d.Record(s, i < failed, false, now)
	}
}

func TestWithPolicyValuesWin(t *testing.T) {
	base := DefaultOutlierConfig()
	if got := base.WithPolicy(registry.OutlierPolicy{}); got != base {
		t.Fatalf("a policy that does not eject changed the config: %+v", got)
	}
	got := base.WithPolicy(registry.OutlierPolicy{FailurePercent: 30, BaseEjection: 10 * time.Minute})
	want := OutlierConfig{
		ConsecutiveFailures: base.ConsecutiveFailures, // kept
		BaseEjectionTime:    10 * time.Minute,
		MaxEjectionTime:     10 * time.Minute, // raised to the base
		MaxEjectionPercent:  registry.DefaultOutlierMaxEjectedPercent,
		FailurePercent:      30,
		MinRequests:         registry.DefaultOutlierMinRequests,
		Interval:            FailurePercentInterval,
	}
	if got != want {
		t.Fatalf("WithPolicy = %+v\nwant %+v", got, want)
	}
	if c := percentConfig(); !c.Enabled() || c.consecutive() {
		t.Fatalf("failure percentage alone: Enabled %v, consecutive %v; want true, false", c.Enabled(), c.consecutive())
	}
}

func TestEjectsByFailurePercentageAtTheWindowsEnd(t *testing.T) {
	cfg := percentConfig()
	d, s := newDetector(t, cfg, 3)
	now := int64(time.Hour)
	d.Record(s[1], false, false, now) // opens the first window
	calls(d, s[0], 10, 6, now)        // 60 % > 50 %
	calls(d, s[1], 20, 0, now)
	calls(d, s[2], 10, 5, now) // 50 %: not over
	if s[0].Ejected() {
		t.Fatal("ejected before the window ended")
	}
	d.Record(s[1], false, false, now+int64(cfg.Interval)) // closes it
	if !s[0].Ejected() || s[1].Ejected() || s[2].Ejected() {
		t.Fatalf("after the window: ejected %v %v %v; want only the endpoint over 50 %%", s[0].Ejected(), s[1].Ejected(), s[2].Ejected())
	}
	if ok, _ := s[0].Admit(now + int64(cfg.Interval+cfg.BaseEjectionTime) - 1); ok {
		t.Fatal("admitted before the policy's base ejection time")
	}
	// The next window starts from zero: s[2]'s 5 failures are forgotten.
	now += int64(cfg.Interval)
	calls(d, s[1], 10, 0, now)
	calls(d, s[2], 10, 4, now)
	d.Record(s[1], false, false, now+int64(cfg.Interval))
	if s[2].Ejected() {
		t.Fatal("the last window's failures counted in the next")
	}
}

func TestFailurePercentageNeedsEnoughCallsAndHosts(t *testing.T) {
	cfg := percentConfig()
	// Too few calls on the failing endpoint.
	d, s := newDetector(t, cfg, 2)
	now := int64(time.Hour)
	d.Record(s[1], false, false, now)
	calls(d, s[0], 9, 9, now)
	calls(d, s[1], 50, 0, now)
	d.Record(s[1], false, false, now+int64(cfg.Interval))
	if s[0].Ejected() {
		t.Fatal("judged on 9 calls, fewer than MinRequests 10")
	}
	// Enough calls, but it is the only endpoint with enough.
	d, s = newDetector(t, cfg, 2)
	d.Record(s[0], true, false, now)
	calls(d, s[0], 50, 50, now)
	calls(d, s[1], 5, 0, now)
	d.Record(s[0], true, false, now+int64(cfg.Interval))
	if s[0].Ejected() {
		t.Fatalf("judged with one endpoint of enough calls; want at least %d", FailurePercentMinimumHosts)
	}
}

func TestFailurePercentageEjectsTheWorstWithinTheCap(t *testing.T) {
	cfg := percentConfig() // at most 50 %: 2 of 4
	d, s := newDetector(t, cfg, 4)
	now := int64(time.Hour)
	d.Record(s[3], false, false, now)
	calls(d, s[0], 10, 7, now)
	calls(d, s[1], 10, 10, now)
	calls(d, s[2], 10, 9, now)
	calls(d, s[3], 10, 0, now)
	d.Record(s[3], false, false, now+int64(cfg.Interval))
	if s[0].Ejected() || !s[1].Ejected() || !s[2].Ejected() || s[3].Ejected() {
		t.Fatalf("ejected %v %v %v %v; want the two worst (100 %%, 90 %%), not 70 %%",
			s[0].Ejected(), s[1].Ejected(), s[2].Ejected(), s[3].Ejected())
	}
}

func TestFailurePercentageEjectionReturnsThroughTheProbe(t *testing.T) {
	cfg := percentConfig()
	d, s := newDetector(t, cfg, 2)
	now := int64(time.Hour)
	d.Record(s[1], false, false, now)
	calls(d, s[0], 10, 10, now)
	calls(d, s[1], 10, 0, now)
	now += int64(cfg.Interval)
	d.Record(s[1], false, false, now)
	if !s[0].Ejected() {
		t.Fatal("not ejected")
	}
	// Calls in flight when it was ejected neither count nor re-eject.
	calls(d, s[0], 10, 10, now)
	if s[0].winCalls.Load() != 0 {
		t.Fatal("calls completed while ejected were counted in the window")
	}
	now += int64(cfg.BaseEjectionTime)
	ok, probe := s[0].Admit(now)
	if !ok || !probe {
		t.Fatalf("Admit after the ejection = %v, %v; want the probe", ok, probe)
	}
	d.Record(s[0], false, true, now)
	if s[0].Ejected() {
		t.Fatal("still ejected after a successful probe")
	}
}

// BenchmarkRecordSuccess is the completion path of a successful call:
// without ejection by failure percentage (no clock), and with it.
func BenchmarkRecordSuccess(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  OutlierConfig
	}{{"consecutive", DefaultOutlierConfig()}, {"percentage", percentConfig()}} {
		b.Run(bc.name, func(b *testing.B) {
			d := &Detector{name: "bench"}
			d.SetConfig(bc.cfg)
			s := make([]*OutlierState, 4)
			for i := range s {
				s[i] = &OutlierState{}
			}
			d.SetMembers(s)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					d.Succeeded(s[i&3])
					i++
				}
			})
		})
	}
}
