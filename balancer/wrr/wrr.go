package wrr

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// config is the parsed "muster_wrr" object.
type config struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	outlier   lb.OutlierConfig
	weights   lb.EndpointWeights
	colors    lb.ColorConfig
	locality  lb.LocalityConfig
	slowStart lb.SlowStartConfig
}

// MarshalJSON returns the config as ParseConfig reads it: grpc-go's xDS
// support marshals a parsed config and parses it again on its way to the
// balancer, which would otherwise get the defaults.
func (c *config) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Outlier         lb.OutlierConfig   `json:"outlier"`
		EndpointWeights lb.EndpointWeights `json:"endpointWeights,omitempty"`
		Colors          lb.ColorConfig     `json:"colors"`
		Locality        lb.LocalityConfig  `json:"locality"`
		SlowStart       lb.SlowStartConfig `json:"slowStart"`
	}{c.outlier, c.weights, c.colors, c.locality, c.slowStart})
}

func defaultConfig() *config {
	return &config{outlier: lb.DefaultOutlierConfig(), colors: lb.DefaultColorConfig(), locality: lb.DefaultLocalityConfig()}
}

type builder struct{}

var (
	_ balancer.Builder      = builder{}
	_ balancer.ConfigParser = builder{}
)

func (builder) Name() string { return Name }

func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &wrrBalancer{}
	b.Base = lb.New(cc, opts, lb.Policy[callbacks]{Name: Name, Init: b.initEndpoint, NewPicker: newPicker})
	return b
}

// ParseConfig parses the policy's JSON config: defaults, then the fields
// present, then validation (see the package documentation).
func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	cfg := defaultConfig()
	if len(bytes.TrimSpace(js)) == 0 {
		return cfg, nil
	}
	var j struct {
		Outlier         json.RawMessage `json:"outlier"`
		EndpointWeights json.RawMessage `json:"endpointWeights"`
		Colors          json.RawMessage `json:"colors"`
		Locality        json.RawMessage `json:"locality"`
		SlowStart       json.RawMessage `json:"slowStart"`
	}
	if err := lb.DecodeStrict(js, &j); err != nil {
		return nil, fmt.Errorf("%s: invalid config: %v", Name, err)
	}
	oc, err := lb.ParseOutlierConfig(j.Outlier)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", Name, err)
	}
	cfg.outlier = oc
	if cfg.weights, err = lb.ParseEndpointWeights(j.EndpointWeights); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if cfg.colors, err = lb.ParseColorConfig(j.Colors); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if cfg.locality, err = lb.ParseLocalityConfig(j.Locality); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if cfg.slowStart, err = lb.ParseSlowStartConfig(j.SlowStart); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return cfg, nil
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
	cfg := defaultConfig()
	if s.BalancerConfig != nil {
		c, ok := s.BalancerConfig.(*config)
		if !ok {
			return fmt.Errorf("%s: unexpected balancer config of type %T", Name, s.BalancerConfig)
		}
		cfg = c
	}
	return b.Update(s, cfg.outlier, cfg.weights, cfg.colors, cfg.locality, cfg.slowStart)
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
