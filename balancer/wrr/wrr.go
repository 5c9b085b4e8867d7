package wrr

import (
	"encoding/json"
	rand "math/rand/v2"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// Name is the policy's name in gRPC service configs.
const Name = "muster_wrr"

// Test hooks.
var (
	nanotime   = lb.Nanotime
	randUint32 = rand.Uint32
)

func init() {
	balancer.Register(builder{})
}

// config is the parsed "muster_wrr" object: the shared fields (lb.Config)
// alone, which it marshals as, at the top level.
type config struct {
	serviceconfig.LoadBalancingConfig `json:"-"`
	lb.Config
}

func defaultConfig() *config { return &config{Config: lb.DefaultConfig()} }

type builder struct{}

var (
	_ balancer.Builder      = builder{}
	_ balancer.ConfigParser = builder{}
)

func (builder) Name() string { return Name }

func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &wrrBalancer{}
	b.Base = lb.New(cc, opts, lb.Plugin[callbacks]{Name: Name, Init: b.initEndpoint, NewPicker: newPicker})
	return b
}

// ParseConfig parses the policy's JSON config: defaults, then the fields
// present, then validation (see the package documentation).
func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	shared, err := lb.ParseConfig(Name, js, &lb.ConfigJSON{}, nil)
	if err != nil {
		return nil, err
	}
	return &config{Config: shared}, nil
}

var (
	_ balancer.Balancer = (*wrrBalancer)(nil)
	_ balancer.Picker   = (*picker)(nil)
)

// wrrBalancer is the muster_wrr balancer: lb.Base with this package's
// picker.
type wrrBalancer struct {
	*lb.Base[callbacks]
}

func (b *wrrBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	cfg, err := lb.ConfigOf(Name, s, defaultConfig)
	if err != nil {
		return err
	}
	return b.Update(s, cfg.Config)
}

// callbacks are an endpoint's Done callbacks, made once so that picks do
// not allocate.
type callbacks struct {
	done      func(balancer.DoneInfo) // for ordinary calls
	probeDone func(balancer.DoneInfo) // for the probe after an ejection
}

func (b *wrrBalancer) initEndpoint(e *lb.Endpoint[callbacks]) {
	det := &b.Detector
	record := func(info balancer.DoneInfo, probe bool) {
		out := lb.Classify(info)
		switch {
		case out == lb.NotSent || out == lb.Canceled:
			if probe {
				e.Outlier.ReleaseProbe() // nothing learnt: probe again
			}
		case out == lb.Failure || probe:
			e.Outlier.CountCall()
			det.Record(&e.Outlier, out == lb.Failure, probe, nanotime())
		default: // a success, not a probe: no ejection changes, no clock
			e.Outlier.CountCall()
			det.Succeeded(&e.Outlier)
		}
	}
	e.Stats.done = func(info balancer.DoneInfo) { record(info, false) }
	e.Stats.probeDone = func(info balancer.DoneInfo) { record(info, true) }
}
