package lb

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/serviceconfig"
)

// Config holds the fields every policy's config has, under the names the
// JSON config gives them. A policy's parsed config embeds it, so that its
// fields stay at the top level of the JSON, and hands it whole to
// Base.Update. It marshals as the policy config ParseConfig reads (with no
// policy fields of its own): grpc-go's xDS support marshals a parsed config
// and parses it again on its way to the balancer, which would otherwise get
// the defaults.
type Config struct {
	Outlier   OutlierConfig   `json:"outlier"`
	Weights   EndpointWeights `json:"endpointWeights,omitempty"`
	Colors    ColorConfig     `json:"colors"`
	Locality  LocalityConfig  `json:"locality"`
	SlowStart SlowStartConfig `json:"slowStart"`
}

// DefaultConfig returns the shared fields of a config that sets none:
// the default outlier ejection, no weights table, the default color key,
// the default locality spill and no slow start.
func DefaultConfig() Config {
	return Config{Outlier: DefaultOutlierConfig(), Colors: DefaultColorConfig(), Locality: DefaultLocalityConfig()}
}

// ConfigJSON is the JSON of the fields every policy's config has, each
// kept raw for its own parser. A policy with fields of its own embeds it
// in the struct it hands ParseConfig, beside those fields.
type ConfigJSON struct {
	Outlier         json.RawMessage `json:"outlier"`
	EndpointWeights json.RawMessage `json:"endpointWeights"`
	Colors          json.RawMessage `json:"colors"`
	Locality        json.RawMessage `json:"locality"`
	SlowStart       json.RawMessage `json:"slowStart"`
}

func (j *ConfigJSON) configJSON() *ConfigJSON { return j }

// PolicyJSON is what ParseConfig decodes a config into: a *ConfigJSON, or
// a pointer to a policy's struct that embeds ConfigJSON.
type PolicyJSON interface {
	configJSON() *ConfigJSON
}

// ParseConfig parses a policy's JSON config js: defaults, then the fields
// present, then validation. It decodes js strictly into j (an unknown
// field, a wrong type or data after the object is an error), calls own,
// when not nil, to parse the policy's own fields from j, then parses the
// shared fields. An empty js gives DefaultConfig without calling own.
// Every error starts with policy and names the field, e.g.
// "muster_wrr: outlier.maxEjectionPercent: 150 is out of range 0..100"
// (own's error is prefixed likewise).
func ParseConfig(policy string, js json.RawMessage, j PolicyJSON, own func() error) (Config, error) {
	cfg := DefaultConfig()
	if len(bytes.TrimSpace(js)) == 0 {
		return cfg, nil
	}
	if err := DecodeStrict(js, j); err != nil {
		return Config{}, fmt.Errorf("%s: invalid config: %v", policy, err)
	}
	if own != nil {
		if err := own(); err != nil {
			return Config{}, fmt.Errorf("%s: %w", policy, err)
		}
	}
	raw := j.configJSON()
	err := func() (err error) {
		if cfg.Outlier, err = ParseOutlierConfig(raw.Outlier); err != nil {
			return err
		}
		if cfg.Weights, err = ParseEndpointWeights(raw.EndpointWeights); err != nil {
			return err
		}
		if cfg.Colors, err = ParseColorConfig(raw.Colors); err != nil {
			return err
		}
		if cfg.Locality, err = ParseLocalityConfig(raw.Locality); err != nil {
			return err
		}
		cfg.SlowStart, err = ParseSlowStartConfig(raw.SlowStart)
		return err
	}()
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", policy, err)
	}
	return cfg, nil
}

// ConfigOf returns the policy's parsed config a ClientConnState carries
// (what the policy's ParseConfig returned), or def() when it carries none.
// A config of another type is an error naming policy and the type.
func ConfigOf[C serviceconfig.LoadBalancingConfig](policy string, s balancer.ClientConnState, def func() C) (C, error) {
	if s.BalancerConfig == nil {
		return def(), nil
	}
	c, ok := s.BalancerConfig.(C)
	if !ok {
		var zero C
		return zero, fmt.Errorf("%s: unexpected balancer config of type %T", policy, s.BalancerConfig)
	}
	return c, nil
}
