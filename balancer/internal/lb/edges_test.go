package lb

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

// The edges of the outlier arithmetic and of the ready list, each found by
// a mutant that survived this package's tests (docs/MUTATION.md).

func TestMaxEjectedEdges(t *testing.T) {
	for _, tc := range []struct{ n, percent, want int }{
		{10, 0, 0},  // 0% disables ejection, even where 1 would be allowed
		{10, -5, 0}, // so does a negative one
		{1, 100, 0}, // never the only endpoint
		{0, 50, 0},
		{2, 1, 1}, // rounded down to 0, raised to 1
		{10, 50, 5},
		{10, 100, 9}, // never all
	} {
		if got := MaxEjected(tc.n, tc.percent); got != tc.want {
			t.Errorf("MaxEjected(%d, %d) = %d, want %d", tc.n, tc.percent, got, tc.want)
		}
	}
}

func TestEnabledNeedsFailuresAndAPercent(t *testing.T) {
	for _, tc := range []struct {
		failures, percent int
		want              bool
	}{
		{5, 50, true},
		{1, 1, true},
		{0, 50, false},
		{5, 0, false},
	} {
		c := OutlierConfig{ConsecutiveFailures: tc.failures, MaxEjectionPercent: tc.percent}
		if got := c.Enabled(); got != tc.want {
			t.Errorf("Enabled() with %d failures, %d%% = %v, want %v", tc.failures, tc.percent, got, tc.want)
		}
	}
}

// An endpoint healthy for longer than MaxEjectionTime since its last
// ejection ended starts again from BaseEjectionTime; one healthy for
// exactly MaxEjectionTime does not.
func TestEjectionTimeStartsOverOnlyAfterMaxEjectionTimeHealthy(t *testing.T) {
	const (
		base = 100 * time.Millisecond
		maxT = time.Second
	)
	for _, tc := range []struct {
		healthy time.Duration
		want    time.Duration
	}{
		{maxT, 2 * base},     // the second ejection in a row
		{maxT + 1, 1 * base}, // a first ejection again
	} {
		t.Run(fmt.Sprint(tc.healthy), func(t *testing.T) {
			var d Detector
			d.SetConfig(OutlierConfig{ConsecutiveFailures: 1, BaseEjectionTime: base, MaxEjectionTime: maxT, MaxEjectionPercent: 50})
			var s, peer OutlierState
			d.SetMembers([]*OutlierState{&s, &peer})

			now := int64(time.Hour)
			d.Record(&s, true, false, now)
			if got := time.Duration(s.until.Load() - now); got != base {
				t.Fatalf("first ejection lasts %v, want %v", got, base)
			}
			now += int64(base)
			if ok, probe := s.Admit(now); !ok || !probe {
				t.Fatalf("Admit at the end of the ejection = %v, %v; want the probe", ok, probe)
			}
			d.Record(&s, false, true, now) // the probe succeeds
			if s.Ejected() {
				t.Fatal("still ejected after a successful probe")
			}
			now += int64(tc.healthy)
			d.Record(&s, true, false, now)
			if got := time.Duration(s.until.Load() - now); got != tc.want {
				t.Fatalf("healthy for %v, then failing: ejected for %v, want %v", tc.healthy, got, tc.want)
			}
		})
	}
}

// stuckCC is a fakeCC whose SubConns for the address "stuck:1" stay
// CONNECTING.
type stuckCC struct{ fakeCC }

func (c *stuckCC) NewSubConn(addrs []grpcresolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	if len(addrs) == 1 && addrs[0].Addr == "stuck:1" {
		return &connectingSC{fakeSC{listener: opts.StateListener}}, nil
	}
	return c.fakeCC.NewSubConn(addrs, opts)
}

type connectingSC struct{ fakeSC }

func (s *connectingSC) Connect() {
	s.once.Do(func() {
		go s.listener(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
	})
}

// recordingBase returns a Base on cc whose policy sends each ready list to
// the channel returned; it is closed at the test's end.
func recordingBase(t *testing.T, cc balancer.ClientConn) (*Base[int], <-chan []Ready[int]) {
	got := make(chan []Ready[int], 16)
	b := New(cc, balancer.BuildOptions{}, Plugin[int]{
		Name:      "test",
		NewPicker: func(r []Ready[int]) balancer.Picker { got <- r; return nil },
	})
	t.Cleanup(b.Close)
	return b, got
}

// awaitReady returns the first ready list NewPicker gets for which done
// holds, failing t if a list has the address never (unless ""), or after
// 10s.
func awaitReady(t *testing.T, got <-chan []Ready[int], never string, done func([]Ready[int]) bool) []Ready[int] {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-got:
			if never != "" && slices.ContainsFunc(r, func(x Ready[int]) bool { return x.Endpoint.Addr == never }) {
				t.Fatalf("ready list %v has %s", r, never)
			}
			if done(r) {
				return r
			}
		case <-deadline:
			t.Fatal("no ready list as expected within 10s")
		}
	}
}

func TestOnlyReadyEndpointsAreHandedOver(t *testing.T) {
	b, got := recordingBase(t, &stuckCC{})
	_ = b.Update(endpoints("a:1", "stuck:1"), DefaultConfig())
	awaitReady(t, got, "stuck:1", func(r []Ready[int]) bool { return len(r) == 1 && r[0].Endpoint.Addr == "a:1" })
}

func TestWeightZeroEndpointsAreLeftOutUnlessAllAre(t *testing.T) {
	ep := func(addr string, w int) grpcresolver.Endpoint {
		in := registry.Instance{Name: "svc", ID: addr, Addr: addr, Weight: w, Draining: w == 0}
		return lbattr.Endpoint(&in)
	}
	state := func(eps ...grpcresolver.Endpoint) balancer.ClientConnState {
		return balancer.ClientConnState{ResolverState: grpcresolver.State{Endpoints: eps}}
	}
	b, got := recordingBase(t, &fakeCC{})

	// All draining (only the one): handed over, weight 1. This also has it
	// connected before the others.
	_ = b.Update(state(ep("127.0.0.1:2", 0)), DefaultConfig())
	awaitReady(t, got, "", func(r []Ready[int]) bool {
		return len(r) == 1 && r[0].Endpoint.Addr == "127.0.0.1:2" && r[0].Weight == 1
	})
	// With two weighted endpoints: left out of every list that has one of
	// them.
	_ = b.Update(state(ep("127.0.0.1:1", 100), ep("127.0.0.1:2", 0), ep("127.0.0.1:3", 300)), DefaultConfig())
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-got:
			draining := slices.ContainsFunc(r, func(x Ready[int]) bool { return x.Endpoint.Addr == "127.0.0.1:2" })
			if draining && len(r) > 1 {
				t.Fatalf("ready list %v has the draining endpoint beside weighted ones", r)
			}
			if len(r) == 2 {
				if r[0].Weight != 100 || r[1].Weight != 300 {
					t.Fatalf("ready %v, want weights 100 and 300", r)
				}
				return
			}
		case <-deadline:
			t.Fatal("no ready list with both weighted endpoints within 10s")
		}
	}
}
