package lb

import (
	estats "google.golang.org/grpc/experimental/stats"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	grpcresolver "google.golang.org/grpc/resolver"
)

// fakeCC is a ClientConn whose SubConns connect when asked and report
// READY.
type fakeCC struct {
	balancer.ClientConn // nil: methods not overridden are not expected

	mu    sync.Mutex
	state balancer.State
}

func (c *fakeCC) MetricsRecorder() estats.MetricsRecorder {
	return estats.UnimplementedMetricsRecorder{}
}

func (c *fakeCC) NewSubConn(addrs []grpcresolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	return &fakeSC{listener: opts.StateListener}, nil
}

func (c *fakeCC) UpdateState(s balancer.State) {
	c.mu.Lock()
	c.state = s
	c.mu.Unlock()
}

func (c *fakeCC) ResolveNow(grpcresolver.ResolveNowOptions) {}

type fakeSC struct {
	balancer.SubConn
	listener func(balancer.SubConnState)
	once     sync.Once
}

func (s *fakeSC) Connect() {
	s.once.Do(func() {
		go func() {
			s.listener(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
			s.listener(balancer.SubConnState{ConnectivityState: connectivity.Ready})
		}()
	})
}
func (s *fakeSC) Shutdown() {}

// RegisterHealthListener reports healthy, as gRPC does without health
// checking configured.
func (s *fakeSC) RegisterHealthListener(l func(balancer.SubConnState)) {
	go l(balancer.SubConnState{ConnectivityState: connectivity.Ready})
}

func endpoints(addrs ...string) balancer.ClientConnState {
	var eps []grpcresolver.Endpoint
	for _, a := range addrs {
		eps = append(eps, grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: a}}})
	}
	return balancer.ClientConnState{ResolverState: grpcresolver.State{Endpoints: eps}}
}

func TestEndpointsSurviveMembershipChangesForTheRetentionTime(t *testing.T) {
	var clock int64 = int64(time.Hour)
	cc := &fakeCC{}
	var inits []string
	b := New(cc, balancer.BuildOptions{}, Plugin[int]{
		Name:      "test",
		Init:      func(e *Endpoint[int]) { inits = append(inits, e.Addr) },
		NewPicker: func([]Ready[int]) balancer.Picker { return nil },
	})
	b.now = func() int64 { return clock }
	defer b.Close()
	cfg := DefaultConfig()

	addrs := func() []string {
		var out []string
		for _, e := range b.Endpoints() {
			out = append(out, e.Addr)
		}
		return out
	}
	if err := b.Update(endpoints("a:1", "b:1"), cfg); err != nil {
		t.Fatal(err)
	}
	bStats := b.Endpoints()[1]
	_ = b.Update(endpoints("a:1"), cfg)
	if got := addrs(); len(got) != 2 {
		t.Fatalf("right after b left: endpoints %v, want a and b (retained)", got)
	}
	clock += int64(time.Minute)
	_ = b.Update(endpoints("a:1", "b:1", "c:1"), cfg)
	if b.Endpoints()[1] != bStats {
		t.Fatal("b came back within the retention time with new stats")
	}
	_ = b.Update(endpoints("a:1", "c:1"), cfg)
	clock += int64(minRetention) + 1
	_ = b.Update(endpoints("a:1", "c:1"), cfg)
	if got := addrs(); len(got) != 2 || got[0] != "a:1" || got[1] != "c:1" {
		t.Fatalf("after the retention time: endpoints %v, want a and c", got)
	}
	if len(inits) != 3 {
		t.Fatalf("Init called for %v, want once each for a, b, c", inits)
	}
	if err := b.Update(endpoints(), cfg); err != balancer.ErrBadResolverState {
		t.Fatalf("Update without endpoints = %v, want ErrBadResolverState", err)
	}
	cc.mu.Lock()
	st := cc.state.ConnectivityState
	cc.mu.Unlock()
	if st != connectivity.TransientFailure {
		t.Fatalf("state without endpoints = %v, want TRANSIENT_FAILURE", st)
	}
}

func TestReadyEndpointsAreHandedOverInAddressOrder(t *testing.T) {
	// The weight comes from the Muster resolver's attribute; without one
	// (and without a table) every endpoint weighs 100. The policies' tests cover weights 0.
	b, got := recordingBase(t, &fakeCC{})
	_ = b.Update(endpoints("b:1", "a:1"), DefaultConfig())
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-got:
			if len(r) < 2 {
				continue
			}
			if r[0].Endpoint.Addr != "a:1" || r[1].Endpoint.Addr != "b:1" || r[0].Weight != 100 {
				t.Fatalf("ready = %v, want a:1 and b:1 in address order, weight 100", r)
			}
			return
		case <-deadline:
			t.Fatal("no picker over both endpoints within 10s")
		}
	}
}

// Endpoints without an instance weigh what the table says, and a new table
// with the same endpoints makes a new picker with the new weights.
func TestWeightsFromTheTableFollowUpdates(t *testing.T) {
	b, got := recordingBase(t, &fakeCC{})
	weights := func(r []Ready[int]) []int {
		w := make([]int, len(r))
		for i, x := range r {
			w[i] = x.Weight
		}
		return w
	}
	for _, tc := range []struct {
		table EndpointWeights
		want  []int
	}{
		{EndpointWeights{"b:1": 300}, []int{100, 300}},
		{EndpointWeights{"a:1": 50}, []int{50, 100}},
		{nil, []int{100, 100}},
	} {
		_ = b.Update(endpoints("a:1", "b:1"), Config{Outlier: DefaultOutlierConfig(), Weights: tc.table, Colors: DefaultColorConfig(), Locality: DefaultLocalityConfig()})
		awaitReady(t, got, "", func(r []Ready[int]) bool { return slices.Equal(weights(r), tc.want) })
	}
}
