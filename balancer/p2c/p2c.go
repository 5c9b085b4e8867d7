package p2c

import (
	"encoding/json"
	"math"
	rand "math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// Name is the policy's name in gRPC service configs.
const Name = "muster_p2c"

// DefaultDecayTime is the decay time constant used when the config does not
// set "decayTime".
const DefaultDecayTime = 10 * time.Second

// Test hooks.
var (
	nanotime   = lb.Nanotime
	randUint64 = rand.Uint64
)

func init() {
	calls.New = newCall
	balancer.Register(builder{})
}

// config is the parsed "muster_p2c" object: the shared fields (lb.Config)
// and decayTime.
type config struct {
	serviceconfig.LoadBalancingConfig `json:"-"`
	lb.Config

	decayTime time.Duration
}

func defaultConfig() *config { return &config{Config: lb.DefaultConfig(), decayTime: DefaultDecayTime} }

// MarshalJSON returns the config as ParseConfig reads it (see lb.Config).
func (c *config) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		DecayTime string `json:"decayTime"`
		lb.Config
	}{c.decayTime.String(), c.Config})
}

type builder struct{}

var (
	_ balancer.Builder      = builder{}
	_ balancer.ConfigParser = builder{}
)

func (builder) Name() string { return Name }

func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &p2cBalancer{}
	b.cfg.Store(defaultConfig())
	b.Base = lb.New(cc, opts, lb.Plugin[load]{
		Name:      Name,
		Init:      b.initEndpoint,
		NewPicker: b.newPicker,
		Calls:     callsOf,
	})
	return b
}

// ParseConfig parses the policy's JSON config: defaults, then the fields
// present, then validation (see the package documentation).
func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var j struct {
		DecayTime *string `json:"decayTime"`
		lb.ConfigJSON
	}
	decayTime := DefaultDecayTime
	shared, err := lb.ParseConfig(Name, js, &j, func() (err error) {
		if j.DecayTime != nil {
			decayTime, err = lb.ParseDuration("decayTime", *j.DecayTime)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &config{Config: shared, decayTime: decayTime}, nil
}

var (
	_ balancer.Balancer = (*p2cBalancer)(nil)
	_ balancer.Picker   = (*picker)(nil)
)

// p2cBalancer is the muster_p2c balancer: lb.Base with this package's
// picker.
type p2cBalancer struct {
	*lb.Base[load]
	cfg     atomic.Pointer[config]
	sampler sampler
}

// callsOf returns the calls to e that completed with a result, for the
// calls metric: the estimated successes plus the (exact) failures.
func callsOf(e *lb.Endpoint[load]) uint64 {
	return e.Stats.succeeded.Load() + e.Outlier.Failures()
}

// initEndpoint binds the endpoint's Done callback for untimed calls.
func (b *p2cBalancer) initEndpoint(e *lb.Endpoint[load]) {
	det := &b.Detector
	e.Stats.done = func(info balancer.DoneInfo) { untimedDone(e, det, info) }
}

func (b *p2cBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	cfg, err := lb.ConfigOf(Name, s, defaultConfig)
	if err != nil {
		return err
	}
	b.cfg.Store(cfg)
	return b.Update(s, cfg.Config)
}

// newPicker is called by lb.Base with its lock held.
func (b *p2cBalancer) newPicker(ready []lb.Ready[load]) balancer.Picker {
	d := newDecay(b.cfg.Load().decayTime)
	now := nanotime()
	seed(ready, now, &d)
	p := &picker{eps: make([]entry, len(ready)), decay: d, det: &b.Detector, sampler: &b.sampler}
	for i, r := range ready {
		p.eps[i] = entry{e: r.Endpoint, picker: r.Picker, weight: float64(r.Weight)}
	}
	return p
}

// seed gives each endpoint without a cost the median cost of those with
// one, so that a new endpoint is neither flooded nor starved.
func seed(ready []lb.Ready[load], now int64, d *decay) {
	var known []float64
	missing := false
	for _, r := range ready {
		if c := r.Endpoint.Stats.costAt(now, d); c > 0 {
			known = append(known, c)
		} else {
			missing = true
		}
	}
	if !missing || len(known) == 0 {
		return
	}
	slices.Sort(known)
	med := known[len(known)/2]
	if len(known)%2 == 0 {
		med = (known[len(known)/2-1] + med) / 2
	}
	for _, r := range ready {
		l := &r.Endpoint.Stats
		if l.cost.CompareAndSwap(0, math.Float64bits(med)) {
			l.stamp.Store(now)
		}
	}
}
