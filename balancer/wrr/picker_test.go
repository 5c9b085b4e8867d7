package wrr

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// namedSC stands for an endpoint's SubConn in picks.
type namedSC struct {
	balancer.SubConn
	name string
}

// scPicker is a child picker that always picks its SubConn.
type scPicker struct{ sc *namedSC }

func (p scPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc}, nil
}

// newTestPicker builds a picker as the balancer does, over endpoints a, b,
// c, ... with the given weights, starting at the sequence's first turn.
func newTestPicker(t *testing.T, weights ...int) (*picker, *wrrBalancer) {
	t.Helper()
	old := randUint32
	randUint32 = func() uint32 { return ^uint32(0) } // the first Add gives 0
	t.Cleanup(func() { randUint32 = old })
	b := &wrrBalancer{Base: &lb.Base[callbacks]{}}
	b.Detector.SetConfig(lb.DefaultOutlierConfig())
	var ready []lb.Ready[callbacks]
	var members []*lb.OutlierState
	for i, w := range weights {
		e := &lb.Endpoint[callbacks]{Addr: string(rune('a' + i))}
		b.initEndpoint(e)
		ready = append(ready, lb.Ready[callbacks]{Endpoint: e, Picker: scPicker{&namedSC{name: e.Addr}}, Weight: w})
		members = append(members, &e.Outlier)
	}
	b.Detector.SetMembers(members)
	return newPicker(ready).(*picker), b
}

// picks returns the addresses of n picks, each call done with info.
func picks(t *testing.T, p *picker, n int, info balancer.DoneInfo) string {
	t.Helper()
	var sb strings.Builder
	for range n {
		res, err := p.Pick(balancer.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		sb.WriteString(res.SubConn.(*namedSC).name)
		res.Done(info)
	}
	return sb.String()
}

var ok = balancer.DoneInfo{BytesSent: true, BytesReceived: true}

func TestPickerFollowsTheSequence(t *testing.T) {
	p, _ := newTestPicker(t, 5, 1, 1)
	if got := picks(t, p, 14, ok); got != "aabacaaaabacaa" {
		t.Fatalf("picks = %s, want aabacaa twice", got)
	}
}

func TestEjectedEndpointIsSkippedThenProbed(t *testing.T) {
	clock := int64(time.Hour)
	old := nanotime
	nanotime = func() int64 { return clock }
	t.Cleanup(func() { nanotime = old })

	p, b := newTestPicker(t, 1, 1, 2) // sequence c a b c
	cfg := b.Detector.Config()
	fail := balancer.DoneInfo{Err: status.Error(codes.Unavailable, "down"), BytesSent: true}
	// c fails every call: 5 failures within 10 picks eject it.
	for range 10 {
		res, _ := p.Pick(balancer.PickInfo{})
		if res.SubConn.(*namedSC).name == "c" {
			res.Done(fail)
		} else {
			res.Done(ok)
		}
	}
	if !p.eps[2].e.Outlier.Ejected() {
		t.Fatal("c not ejected after 5 failures")
	}
	// c's turns go to a and b in proportion to their weights (1:1):
	// each gets 50% ± 5 points of 4000 picks.
	if got := picks(t, p, 4000, ok); strings.Contains(got, "c") {
		t.Fatal("ejected endpoint picked")
	} else if na := strings.Count(got, "a"); na < 1800 || na > 2200 {
		t.Fatalf("with c ejected, a got %d of 4000 picks, b %d; want 2000 ± 200 each", na, 4000-na)
	}
	clock += int64(cfg.BaseEjectionTime)
	got := picks(t, p, 8, fail)
	if strings.Count(got, "c") != 1 {
		t.Fatalf("picks after the ejection time, all failing = %s, want exactly one probe of c", got)
	}
	if !p.eps[2].e.Outlier.Ejected() {
		t.Fatal("c not ejected again after its probe failed")
	}
	clock += int64(2 * cfg.BaseEjectionTime)
	if got := picks(t, p, 400, ok); strings.Count(got, "c") < 199 {
		t.Fatalf("after the second ejection, with the probe succeeding, c got %d of 400 picks, want its 50%% back", strings.Count(got, "c"))
	}
}

func TestPickAndDoneDoNotAllocate(t *testing.T) {
	p, _ := newTestPicker(t, 100, 100, 200)
	fail := balancer.DoneInfo{Err: status.Error(codes.Unavailable, "x"), BytesSent: true}
	for _, info := range []balancer.DoneInfo{ok, fail} {
		if n := testing.AllocsPerRun(10000, func() {
			res, _ := p.Pick(balancer.PickInfo{})
			res.Done(info)
		}); n != 0 {
			t.Errorf("Pick+Done (err %v) allocates %v times per call, want 0", info.Err, n)
		}
	}
}

func TestParseConfig(t *testing.T) {
	for _, js := range []string{``, `{}`, `{"outlier":{}}`, `{"outlier":{"consecutiveFailures":2,"baseEjectionTime":"250ms","maxEjectionTime":"1s","maxEjectionPercent":10}}`,
		`{"endpointWeights":{}}`, `{"endpointWeights":{"10.0.0.7:9000":200}}`, `{"colors":{}}`, `{"colors":{"key":"track","strict":true}}`} {
		if _, err := (builder{}).ParseConfig([]byte(js)); err != nil {
			t.Errorf("ParseConfig(%s): %v", js, err)
		}
	}
	if got, _ := (builder{}).ParseConfig([]byte(`{"endpointWeights":{"10.0.0.7:9000":200}}`)); got.(*config).Weights["10.0.0.7:9000"] != 200 {
		t.Errorf("endpointWeights parsed as %v", got.(*config).Weights)
	}
	got, _ := builder{}.ParseConfig([]byte(`{"outlier":{"baseEjectionTime":"250ms","maxEjectionTime":"1s"}}`))
	if c := got.(*config).Outlier; c.BaseEjectionTime != 250*time.Millisecond || c.MaxEjectionTime != time.Second ||
		c.ConsecutiveFailures != lb.DefaultConsecutiveFailures || c.MaxEjectionPercent != lb.DefaultMaxEjectionPercent {
		t.Errorf("parsed %+v", c)
	}
	if got, _ := (builder{}).ParseConfig([]byte(`{"colors":{"strict":true}}`)); got.(*config).Colors != (lb.ColorConfig{Key: "color", Strict: true}) {
		t.Errorf("colors parsed as %+v", got.(*config).Colors)
	}
	for _, tc := range []struct{ js, want string }{
		{`{"colors":{"canary":5}}`, `muster_wrr: colors: json: unknown field "canary"`},
		{`{"slowStart":{"window":"10s","minWeightPercent":150}}`, `muster_wrr: slowStart.minWeightPercent: 150 is out of range 0..100`},
		{`{"slowStart":{"window":"10s","aggression":0}}`, `muster_wrr: slowStart.aggression: 0 is out of range 0.1..10`},
		{`{"locality":{"overprovisioningFactor":"1.4"}}`, `muster_wrr: locality: json: cannot unmarshal string`},
		{`{"locality":{"overprovisioningFactor":0}}`, `muster_wrr: locality.overprovisioningFactor: 0 is out of range 1..10`},
		{`{"colors":{"key":7}}`, `muster_wrr: colors: json: cannot unmarshal number`},
		{`{"weights":[1]}`, `muster_wrr: invalid config: json: unknown field "weights"`},
		{`{"decayTime":"1s"}`, `muster_wrr: invalid config: json: unknown field "decayTime"`},
		{`{"outlier":{"consecutiveFailures":-1}}`, `muster_wrr: outlier.consecutiveFailures: -1 is negative; want 0 (no ejection) or more`},
		{`{"outlier":{"consecutiveFailures":"5"}}`, `muster_wrr: outlier: json: cannot unmarshal string`},
		{`{"outlier":{"maxEjectionPercent":200}}`, `muster_wrr: outlier.maxEjectionPercent: 200 is out of range 0..100`},
		{`{"outlier":{"baseEjectionTime":"30"}}`, `muster_wrr: outlier.baseEjectionTime: "30" is not a duration; want e.g. "30s" or "250ms"`},
		{`{"outlier":{"maxEjectionTime":"1s"}}`, `muster_wrr: outlier.maxEjectionTime: 1s is shorter than outlier.baseEjectionTime 30s`},
		{`{"endpointWeights":{"10.0.0.7:9000":0}}`, `muster_wrr: endpointWeights: "10.0.0.7:9000": weight 0 is out of range 1..10000`},
		{`{"endpointWeights":{"10.0.0.7:9000":"heavy"}}`, `muster_wrr: endpointWeights: "10.0.0.7:9000": weight "heavy" is not an integer`},
		{`{"endpointWeights":{"nohost":1}}`, `muster_wrr: endpointWeights: "nohost" is not a host:port address`},
	} {
		_, err := builder{}.ParseConfig([]byte(tc.js))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s) error = %v, want one starting with %q", tc.js, err, tc.want)
		}
	}
}

func TestBadConfigFailsTheChannel(t *testing.T) {
	_, err := grpc.NewClient("passthrough:///x",
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_wrr":{"outlier":{"baseEjectionTime":"-1s"}}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil || !strings.Contains(err.Error(), `muster_wrr: outlier.baseEjectionTime: "-1s" is not positive`) {
		t.Fatalf("NewClient with a bad muster_wrr config: %v", err)
	}
}

func TestModMatchesTheRemainder(t *testing.T) {
	for _, n := range []uint32{1, 2, 3, 7, 10, 600, 1000, 65537, 1<<31 - 1, 1 << 31, 1<<32 - 1} {
		p := &picker{n: n, m: ^uint64(0)/uint64(n) + 1}
		for _, i := range []uint32{0, 1, n - 1, n, n + 1, 1<<32 - 1, 1<<32 - 2, 0x9e3779b9, 12345678} {
			if got, want := p.mod(i), i%n; got != want {
				t.Fatalf("mod(%d) with n=%d = %d, want %d", i, n, got, want)
			}
		}
	}
}

// grpc-go's xDS support marshals the parsed config and parses the result:
// nothing may be lost on the way.
func TestConfigSurvivesAJSONRoundTrip(t *testing.T) {
	js := `{"outlier":{"consecutiveFailures":2,"baseEjectionTime":"1.5s","maxEjectionTime":"5m","maxEjectionPercent":0},"endpointWeights":{"db.local:5":10000},"colors":{"key":"","strict":true},"locality":{"overprovisioningFactor":3},"slowStart":{"window":"1m","aggression":0.5,"minWeightPercent":0}}`
	want, _ := builder{}.ParseConfig([]byte(js))
	out, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := builder{}.ParseConfig(out)
	if err != nil {
		t.Fatalf("ParseConfig(%s): %v", out, err)
	}
	if g, w := got.(*config), want.(*config); g.Outlier != w.Outlier || !maps.Equal(g.Weights, w.Weights) || g.Colors != w.Colors ||
		g.Locality != w.Locality || g.Locality.OverprovisioningFactor != 3 ||
		!g.SlowStart.Equal(w.SlowStart) || g.SlowStart.Window != time.Minute {
		t.Errorf("marshalled as %s, parsed again as %+v, want %+v", out, *g, *w)
	}
}
