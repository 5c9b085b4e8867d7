package p2c

import (
	"encoding/json"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// fakeClock replaces nanotime for one test.
type fakeClock struct{ t int64 }

func (c *fakeClock) now() int64              { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t += int64(d) }

func useClock(t *testing.T) *fakeClock {
	c := &fakeClock{t: int64(time.Hour)}
	old := nanotime
	nanotime = c.now
	t.Cleanup(func() { nanotime = old })
	return c
}

// useRand makes the two draws of each pick i and j (of n endpoints).
func useRand(t *testing.T, n int, pairs ...[2]int) {
	old := randUint64
	k := 0
	randUint64 = func() uint64 {
		p := pairs[k%len(pairs)]
		k++
		i, j := p[0], p[1]
		if j > i {
			j--
		}
		// Inverse of choose's scaling: the smallest 32-bit value mapping to
		// i (of n) and to j (of n-1).
		hi := (uint64(i)<<32 + uint64(n) - 1) / uint64(n)
		lo := (uint64(j)<<32 + uint64(n-2)) / uint64(n-1)
		return hi<<32 | lo
	}
	t.Cleanup(func() { randUint64 = old })
}

// okPicker is a child picker that always picks.
type okPicker struct{}

func (okPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, nil
}

type testEndpoint struct {
	addr   string
	cost   time.Duration // 0: none yet
	weight int
}

func newTestPicker(clock *fakeClock, det *lb.Detector, eps ...testEndpoint) *picker {
	p := &picker{decay: newDecay(DefaultDecayTime), det: det, sampler: &sampler{fixed: true}}
	var members []*lb.OutlierState
	for _, te := range eps {
		e := &lb.Endpoint[load]{Addr: te.addr}
		e.Stats.done = func(info balancer.DoneInfo) { untimedDone(e, det, info) }
		if te.cost > 0 {
			e.Stats.cost.Store(math.Float64bits(float64(te.cost)))
			e.Stats.stamp.Store(clock.now())
		}
		w := te.weight
		if w == 0 {
			w = 100
		}
		p.eps = append(p.eps, entry{e: e, picker: okPicker{}, weight: float64(w)})
		members = append(members, &e.Outlier)
	}
	det.SetMembers(members)
	return p
}

// pick picks and returns the endpoint's address and the Done callback.
func pick(t *testing.T, p *picker) (string, func(balancer.DoneInfo)) {
	t.Helper()
	before := make([]int64, len(p.eps))
	for i, e := range p.eps {
		before[i] = e.e.Stats.inFlight.Load()
	}
	res, err := p.Pick(balancer.PickInfo{})
	if err != nil {
		t.Fatalf("Pick: %v", err)
	}
	// The endpoint picked is the one whose in-flight count went up.
	for i, e := range p.eps {
		if e.e.Stats.inFlight.Load() > before[i] {
			return e.e.Addr, res.Done
		}
	}
	t.Fatal("Pick did not count the call in flight")
	return "", nil
}

var (
	ok     = balancer.DoneInfo{BytesSent: true, BytesReceived: true}
	failed = balancer.DoneInfo{Err: status.Error(codes.Unavailable, "down"), BytesSent: true}
)

func TestPickTakesTheLowerScoreOfTwo(t *testing.T) {
	clock := useClock(t)
	useRand(t, 3, [2]int{0, 1}, [2]int{1, 0}, [2]int{2, 1})
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	p := newTestPicker(clock, det,
		testEndpoint{addr: "a", cost: time.Millisecond},
		testEndpoint{addr: "b", cost: 2 * time.Millisecond},
		testEndpoint{addr: "c", cost: 3 * time.Millisecond})
	for i, want := range []string{"a", "a", "b"} {
		got, done := pick(t, p)
		done(balancer.DoneInfo{}) // not sent: no sample
		if got != want {
			t.Fatalf("pick %d = %s, want %s", i, got, want)
		}
	}
}

func TestInFlightCallsAndWeightsEnterTheScore(t *testing.T) {
	clock := useClock(t)
	useRand(t, 2, [2]int{0, 1})
	det := new(lb.Detector)
	p := newTestPicker(clock, det,
		testEndpoint{addr: "a", cost: time.Millisecond},
		testEndpoint{addr: "b", cost: 2 * time.Millisecond, weight: 300})
	// Scores (cost × (in flight + 1) / weight) as calls stay in flight:
	// b 2/300 < a 1/100, so b; then a 1/100 < b 4/300, so a; then
	// b 4/300 < a 2/100, so b; then b 6/300 = a 2/100, a tie: the first
	// drawn, a.
	var got []string
	for range 4 {
		addr, _ := pick(t, p)
		got = append(got, addr)
	}
	if s := strings.Join(got, ""); s != "baba" {
		t.Fatalf("picks with calls kept in flight = %s, want baba", s)
	}
}

func TestColdEndpointsTakeOneCallAtATime(t *testing.T) {
	clock := useClock(t)
	useRand(t, 2, [2]int{0, 1})
	p := newTestPicker(clock, new(lb.Detector), testEndpoint{addr: "a"}, testEndpoint{addr: "b"})
	a1, doneA := pick(t, p)
	b1, _ := pick(t, p)
	if a1 != "a" || b1 != "b" {
		t.Fatalf("first picks = %s, %s; want a, b (one call each while nothing is known)", a1, b1)
	}
	clock.advance(time.Millisecond)
	doneA(ok) // a now has a cost; b still none, with a call in flight
	for range 3 {
		if got, _ := pick(t, p); got != "a" {
			t.Fatalf("pick = %s, want a: b has no sample and a call in flight", got)
		}
	}
}

func TestNewEndpointStartsFromThePeersMedian(t *testing.T) {
	clock := useClock(t)
	ready := func(costs ...time.Duration) []lb.Ready[load] {
		var rs []lb.Ready[load]
		for _, c := range costs {
			e := &lb.Endpoint[load]{}
			if c > 0 {
				e.Stats.cost.Store(math.Float64bits(float64(c)))
				e.Stats.stamp.Store(clock.now())
			}
			rs = append(rs, lb.Ready[load]{Endpoint: e, Picker: okPicker{}, Weight: 100})
		}
		return rs
	}
	for _, tc := range []struct {
		costs []time.Duration
		want  time.Duration
	}{
		{[]time.Duration{time.Millisecond, 5 * time.Millisecond, 2 * time.Millisecond, 0}, 2 * time.Millisecond},
		{[]time.Duration{time.Millisecond, 5 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 0}, 3 * time.Millisecond},
		{[]time.Duration{0, 0}, 0},
	} {
		rs := ready(tc.costs...)
		d := newDecay(DefaultDecayTime)
		seed(rs, clock.now(), &d)
		got := rs[len(rs)-1].Endpoint.Stats.costAt(clock.now(), &d)
		if math.Abs(got-float64(tc.want)) > 1 {
			t.Errorf("costs %v: new endpoint starts at %v, want %v", tc.costs, time.Duration(got), tc.want)
		}
	}
}

func TestCostIsAPeakEWMADecayedInTime(t *testing.T) {
	clock := useClock(t)
	tau := newDecay(DefaultDecayTime)
	var l load
	at := func() time.Duration { return time.Duration(l.costAt(clock.now(), &tau)) }
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if d := got - want; d < -time.Microsecond || d > time.Microsecond {
			t.Fatalf("%s: cost %v, want %v", what, got, want)
		}
	}

	l.observe(int64(10*time.Millisecond), clock.now(), lb.Success, &tau)
	near("first sample", at(), 10*time.Millisecond)
	l.observe(int64(30*time.Millisecond), clock.now(), lb.Success, &tau)
	near("a higher sample is taken at once (peak)", at(), 30*time.Millisecond)

	clock.advance(DefaultDecayTime)
	near("one decay time without samples", at(), dur(30e6/math.E))
	l.observe(int64(10*time.Millisecond), clock.now(), lb.Success, &tau)
	// A lower sample after dt weighs 1 − exp(−dt/τ) against the stored
	// cost: 30ms×e⁻¹ + 10ms×(1 − e⁻¹).
	near("a lower sample one decay time later", at(), dur(30e6/math.E+10e6*(1-1/math.E)))

	before := at()
	l.observe(int64(100*time.Microsecond), clock.now(), lb.Failure, &tau)
	near("a fast failure doubles the cost", at(), 2*before)
	for range 100 {
		l.observe(int64(time.Millisecond), clock.now(), lb.Failure, &tau)
	}
	near("failures are capped", at(), time.Duration(maxCost))

	var m load
	m.observe(int64(10*time.Millisecond), clock.now(), lb.Success, &tau)
	m.observe(int64(time.Millisecond), clock.now(), lb.Canceled, &tau)
	if got := time.Duration(m.costAt(clock.now(), &tau)); got != 10*time.Millisecond {
		t.Fatalf("a canceled call shorter than the cost changed it to %v", got)
	}
	m.observe(int64(50*time.Millisecond), clock.now(), lb.Canceled, &tau)
	if got := time.Duration(m.costAt(clock.now(), &tau)); got != 50*time.Millisecond {
		t.Fatalf("a canceled call longer than the cost: cost %v, want 50ms (at least that long)", got)
	}
}

func TestFailedCallRaisesTheScoreAtOnce(t *testing.T) {
	clock := useClock(t)
	useRand(t, 2, [2]int{0, 1})
	p := newTestPicker(clock, new(lb.Detector),
		testEndpoint{addr: "a", cost: time.Millisecond},
		testEndpoint{addr: "b", cost: 1500 * time.Microsecond})
	_, done := pick(t, p)
	done(failed)
	if got, _ := pick(t, p); got != "b" {
		t.Fatalf("after a's failure, pick = %s, want b", got)
	}
}

func TestEjectedEndpointGetsOneProbePerPeriod(t *testing.T) {
	clock := useClock(t)
	useRand(t, 3, [2]int{0, 1}, [2]int{2, 0})
	det := new(lb.Detector)
	cfg := lb.DefaultOutlierConfig()
	det.SetConfig(cfg)
	p := newTestPicker(clock, det,
		testEndpoint{addr: "a", cost: time.Millisecond},
		testEndpoint{addr: "b", cost: 2 * time.Millisecond},
		testEndpoint{addr: "c", cost: 3 * time.Millisecond})
	a := p.eps[0].e
	for range cfg.ConsecutiveFailures {
		a.Stats.cost.Store(math.Float64bits(1e6)) // keep a the best
		addr, done := pick(t, p)
		if addr != "a" {
			t.Fatalf("pick = %s, want a", addr)
		}
		done(failed)
	}
	if !a.Outlier.Ejected() {
		t.Fatalf("a not ejected after %d failures", cfg.ConsecutiveFailures)
	}
	a.Stats.cost.Store(math.Float64bits(1e6))
	for range 10 {
		if addr, done := pick(t, p); addr == "a" {
			t.Fatal("ejected endpoint picked")
		} else {
			done(ok)
		}
	}
	clock.advance(cfg.BaseEjectionTime)
	addr, probeDone := pick(t, p)
	if addr != "a" {
		t.Fatalf("first pick after the ejection = %s, want a (the probe)", addr)
	}
	for range 10 {
		if addr, done := pick(t, p); addr == "a" {
			t.Fatal("second call to a while its probe is in flight")
		} else {
			done(ok)
		}
	}
	probeDone(failed)
	clock.advance(cfg.BaseEjectionTime) // the second ejection is twice as long
	for range 10 {
		if addr, done := pick(t, p); addr == "a" {
			t.Fatal("picked during the second ejection")
		} else {
			done(ok)
		}
	}
	clock.advance(cfg.BaseEjectionTime)
	addr, probeDone = pick(t, p)
	if addr != "a" {
		t.Fatalf("pick after the second ejection = %s, want a", addr)
	}
	probeDone(ok)
	if a.Outlier.Ejected() {
		t.Fatal("still ejected after a successful probe")
	}
}

func TestUnsentCallIsNoSample(t *testing.T) {
	clock := useClock(t)
	p := newTestPicker(clock, new(lb.Detector), testEndpoint{addr: "a", cost: time.Millisecond})
	_, done := pick(t, p)
	clock.advance(time.Second)
	done(balancer.DoneInfo{}) // the transport was not ready; gRPC picks again
	e := p.eps[0].e
	if n := e.Stats.inFlight.Load(); n != 0 {
		t.Fatalf("in flight = %d after Done, want 0", n)
	}
	if got := math.Float64frombits(e.Stats.cost.Load()); got != 1e6 {
		t.Fatalf("cost = %v after an unsent call, want unchanged 1ms", time.Duration(got))
	}
}

func TestPickAndDoneDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items; run without -race")
	}
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	p := newTestPicker(&fakeClock{}, det,
		testEndpoint{addr: "a", cost: time.Millisecond},
		testEndpoint{addr: "b", cost: time.Millisecond},
		testEndpoint{addr: "c", cost: time.Millisecond})
	errFail := status.Error(codes.Unavailable, "x")
	for _, s := range []struct {
		name string
		s    *sampler
	}{{"timed", &sampler{fixed: true}}, {"sampled", new(sampler)}} {
		p.sampler = s.s
		for _, tc := range []struct {
			name string
			info balancer.DoneInfo
		}{{"success", ok}, {"failure", balancer.DoneInfo{Err: errFail, BytesSent: true}}} {
			allocs := testing.AllocsPerRun(10000, func() {
				res, _ := p.Pick(balancer.PickInfo{})
				res.Done(tc.info)
			})
			if allocs != 0 {
				t.Errorf("Pick+Done (%s, %s) allocates %v times per call, want 0", s.name, tc.name, allocs)
			}
		}
	}
}

func TestParseConfig(t *testing.T) {
	def := defaultConfig()
	isDef := func(c *config) bool {
		return c.decayTime == def.decayTime && c.Outlier == def.Outlier && c.Weights == nil && c.Colors == lb.DefaultColorConfig()
	}
	for _, tc := range []struct {
		js   string
		want func(*config) bool
	}{
		{``, isDef},
		{`{}`, isDef},
		{`{"outlier":null}`, isDef},
		{`{"endpointWeights":null}`, isDef},
		{`{"endpointWeights":{"10.0.0.7:9000":200,"10.0.0.8:9000":1}}`, func(c *config) bool {
			return len(c.Weights) == 2 && c.Weights["10.0.0.7:9000"] == 200 && c.Weights["10.0.0.8:9000"] == 1
		}},
		{`{"colors":null}`, isDef},
		{`{"colors":{"key":"track","strict":true}}`, func(c *config) bool { return c.Colors == lb.ColorConfig{Key: "track", Strict: true} }},
		{`{"colors":{"key":""}}`, func(c *config) bool { return c.Colors == lb.ColorConfig{} }},
		{`{"decayTime":"1.5s"}`, func(c *config) bool { return c.decayTime == 1500*time.Millisecond }},
		{`{"locality":{"overprovisioningFactor":2}}`, func(c *config) bool { return c.Locality.OverprovisioningFactor == 2 }},
		{`{"locality":{}}`, func(c *config) bool { return c.Locality == lb.DefaultLocalityConfig() }},
		{`{"outlier":{"consecutiveFailures":0}}`, func(c *config) bool {
			return !c.Outlier.Enabled() && c.Outlier.BaseEjectionTime == lb.DefaultBaseEjectionTime
		}},
		{`{"outlier":{"consecutiveFailures":3,"baseEjectionTime":"1s","maxEjectionTime":"1m","maxEjectionPercent":100}}`, func(c *config) bool {
			return c.Outlier == lb.OutlierConfig{ConsecutiveFailures: 3, BaseEjectionTime: time.Second, MaxEjectionTime: time.Minute, MaxEjectionPercent: 100}
		}},
	} {
		got, err := builder{}.ParseConfig([]byte(tc.js))
		if err != nil {
			t.Errorf("ParseConfig(%s): %v", tc.js, err)
			continue
		}
		if c := got.(*config); !tc.want(c) {
			t.Errorf("ParseConfig(%s) = %+v", tc.js, *c)
		}
	}
	for _, tc := range []struct{ js, want string }{
		{`{"decayTime":"10"}`, `muster_p2c: decayTime: "10" is not a duration; want e.g. "30s" or "250ms"`},
		{`{"decayTime":"-1s"}`, `muster_p2c: decayTime: "-1s" is not positive`},
		{`{"decayTime":"0s"}`, `muster_p2c: decayTime: "0s" is not positive`},
		{`{"decayTime":10}`, `muster_p2c: invalid config: json: cannot unmarshal number into Go struct field .decayTime of type string`},
		{`{"decay":"1s"}`, `muster_p2c: invalid config: json: unknown field "decay"`},
		{`[]`, `muster_p2c: invalid config: json: cannot unmarshal array`},
		{`{"outlier":{"consecutiveFailures":-1}}`, `muster_p2c: outlier.consecutiveFailures: -1 is negative; want 0 (no ejection) or more`},
		{`{"outlier":{"maxEjectionPercent":101}}`, `muster_p2c: outlier.maxEjectionPercent: 101 is out of range 0..100`},
		{`{"outlier":{"maxEjectionPercent":-5}}`, `muster_p2c: outlier.maxEjectionPercent: -5 is out of range 0..100`},
		{`{"outlier":{"baseEjectionTime":"soon"}}`, `muster_p2c: outlier.baseEjectionTime: "soon" is not a duration`},
		{`{"outlier":{"baseEjectionTime":"0s"}}`, `muster_p2c: outlier.baseEjectionTime: "0s" is not positive`},
		{`{"outlier":{"maxEjectionTime":"-1m"}}`, `muster_p2c: outlier.maxEjectionTime: "-1m" is not positive`},
		{`{"outlier":{"baseEjectionTime":"10m"}}`, `muster_p2c: outlier.maxEjectionTime: 5m0s is shorter than outlier.baseEjectionTime 10m0s`},
		{`{"outlier":{"consecutive":5}}`, `muster_p2c: outlier: json: unknown field "consecutive"`},
		{`{"outlier":5}`, `muster_p2c: outlier: json: cannot unmarshal number`},
		{`{"endpointWeights":{"10.0.0.7:9000":20000}}`, `muster_p2c: endpointWeights: "10.0.0.7:9000": weight 20000 is out of range 1..10000`},
		{`{"endpointWeights":{"10.0.0.7":200}}`, `muster_p2c: endpointWeights: "10.0.0.7" is not a host:port address`},
		{`{"endpointWeights":[]}`, `muster_p2c: endpointWeights: json: cannot unmarshal array`},
		{`{"colors":{"color":"blue"}}`, `muster_p2c: colors: json: unknown field "color"`},
		{`{"colors":{"strict":"yes"}}`, `muster_p2c: colors: json: cannot unmarshal string`},
		{`{"colors":{"key":"` + strings.Repeat("k", 129) + `"}}`, `muster_p2c: colors.key: 129 bytes is longer than 128`},
		{`{"locality":{"overprovisioningFactor":0.5}}`, `muster_p2c: locality.overprovisioningFactor: 0.5 is out of range 1..10`},
		{`{"locality":{"overprovisioningFactor":11}}`, `muster_p2c: locality.overprovisioningFactor: 11 is out of range 1..10`},
		{`{"locality":{"factor":2}}`, `muster_p2c: locality: json: unknown field "factor"`},
		{`{"slowStart":{"aggression":2}}`, `muster_p2c: slowStart.window: missing`},
		{`{"slowStart":{"window":"2h"}}`, `muster_p2c: slowStart.window: 2h0m0s is longer than 1h0m0s`},
	} {
		_, err := builder{}.ParseConfig([]byte(tc.js))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s) error = %v, want one starting with %q", tc.js, err, tc.want)
		}
	}
}

func TestBadConfigFailsTheChannel(t *testing.T) {
	_, err := grpc.NewClient("passthrough:///x",
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{"outlier":{"maxEjectionPercent":150}}}]}`),
		grpc.WithTransportCredentials(insecureCreds()))
	if err == nil || !strings.Contains(err.Error(), "muster_p2c: outlier.maxEjectionPercent: 150 is out of range 0..100") {
		t.Fatalf("NewClient with a bad muster_p2c config: %v", err)
	}
}

func dur(ns float64) time.Duration { return time.Duration(ns) }

// A parsed config marshals to JSON that parses to the same config, as
// grpc-go's xDS support needs (it marshals a parsed config and parses it
// again).
func TestConfigSurvivesAJSONRoundTrip(t *testing.T) {
	for _, js := range []string{`{}`,
		`{"decayTime":"1.5s","outlier":{"consecutiveFailures":0,"baseEjectionTime":"250ms","maxEjectionTime":"1m","maxEjectionPercent":100},` +
			`"endpointWeights":{"10.0.0.7:9000":200,"[::1]:80":1},"colors":{"key":"track","strict":true},"locality":{"overprovisioningFactor":1.2},` +
			`"slowStart":{"window":"30s","aggression":2,"minWeightPercent":5}}`,
		`{"colors":{"key":""}}`} {
		first, err := builder{}.ParseConfig([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(first)
		if err != nil {
			t.Fatal(err)
		}
		second, err := builder{}.ParseConfig(out)
		if err != nil {
			t.Fatalf("ParseConfig of the marshalled %s (%s): %v", js, out, err)
		}
		a, b := first.(*config), second.(*config)
		if a.decayTime != b.decayTime || a.Outlier != b.Outlier || !maps.Equal(a.Weights, b.Weights) || a.Colors != b.Colors || a.Locality != b.Locality ||
			!a.SlowStart.Equal(b.SlowStart) {
			t.Errorf("%s → %s → %+v, want %+v", js, out, *b, *a)
		}
	}
}
