package resolver

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/registry"
)

// WithPolicies makes the Builder follow each service's call policy in src
// (registry/etcd's Policies) and hand it with every state, as a state
// attribute that PolicyOf reads; a change pushes the same endpoints again
// with the new policy. Like canaries, it is followed once per service for
// all the Builder's channels of the service. Muster's xDS control plane
// publishes it to its clients (see docs/POLICY.md for what each client
// applies). nil (the default) follows none.
func WithPolicies(src registry.PolicySource) Option {
	return func(o *options) { o.served.Policies = src }
}

// PolicyOf returns the call policy a state carries (see WithPolicies); ok
// is false when it carries none, or one that sets nothing.
func PolicyOf(s grpcresolver.State) (p registry.Policy, ok bool) {
	return lbattr.PolicyOf(s)
}

// WithPolicyServiceConfig makes channels take their service config from
// the resolver: loadBalancingConfig, the JSON array given (such as
// `[{"muster_p2c":{}}]`), and, when the service's call policy (followed
// with WithPolicies) has a timeout or retries, one methodConfig for every
// method with them (gRFC A6). A service config from the resolver replaces
// the channel's default one (grpc.WithDefaultServiceConfig) whole, balancer
// included, so name the channel's balancer here; and gRPC keeps the last
// one the resolver gave, so the resolver gives one with every state, the
// method config dropped when the policy no longer has it. A target's lb=
// replaces the loadBalancingConfig (the method config stays). A
// loadBalancingConfig that is not a JSON array is an error, and so is
// giving WithBalancer too.
func WithPolicyServiceConfig(loadBalancingConfig string) Option {
	return func(o *options) {
		var arr []json.RawMessage
		if err := json.Unmarshal([]byte(loadBalancingConfig), &arr); err != nil {
			o.invalid("WithPolicyServiceConfig(%.64q): the loadBalancingConfig is not a JSON array, such as [{\"muster_p2c\":{}}]: %w",
				loadBalancingConfig, err)
			return
		}
		o.policyLB = loadBalancingConfig
	}
}

// policyServiceConfig returns the service config JSON of p with the
// loadBalancingConfig lb: a method config only when p has a timeout or
// retries.
func policyServiceConfig(p registry.Policy, lb string) string {
	if p.Timeout == 0 && p.Retry.MaxAttempts < 2 {
		js, err := json.Marshal(struct {
			LoadBalancingConfig json.RawMessage `json:"loadBalancingConfig"`
		}{json.RawMessage(lb)})
		if err != nil {
			return ""
		}
		return string(js)
	}
	type retryPolicy struct {
		MaxAttempts          int      `json:"maxAttempts"`
		InitialBackoff       string   `json:"initialBackoff"`
		MaxBackoff           string   `json:"maxBackoff"`
		BackoffMultiplier    float64  `json:"backoffMultiplier"`
		RetryableStatusCodes []string `json:"retryableStatusCodes"`
	}
	type methodConfig struct {
		Name        []struct{}   `json:"name"`
		Timeout     string       `json:"timeout,omitempty"`
		RetryPolicy *retryPolicy `json:"retryPolicy,omitempty"`
	}
	mc := methodConfig{Name: []struct{}{{}}}
	if p.Timeout > 0 {
		mc.Timeout = protoDuration(p.Timeout)
	}
	if r := p.Retry; r.MaxAttempts > 1 {
		mc.RetryPolicy = &retryPolicy{MaxAttempts: r.MaxAttempts, InitialBackoff: protoDuration(r.BackoffBase),
			MaxBackoff: protoDuration(r.BackoffMax), BackoffMultiplier: 2, RetryableStatusCodes: r.Codes}
	}
	js, err := json.Marshal(struct {
		LoadBalancingConfig json.RawMessage `json:"loadBalancingConfig"`
		MethodConfig        []methodConfig  `json:"methodConfig"`
	}{json.RawMessage(lb), []methodConfig{mc}})
	if err != nil {
		return "" // lb is not JSON: WithPolicyServiceConfig's check logs it
	}
	return string(js)
}

// protoDuration writes d as the JSON form of a protobuf Duration ("0.8s").
func protoDuration(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// serviceConfig returns the service config handed to the channel with l:
// its loadBalancingConfig (channelBalancer) and, with
// WithPolicyServiceConfig, the method config of l's call policy; nil for
// none. It is made and parsed again only after the settings changed.
func (r *musterResolver) serviceConfig(l served.List) *serviceconfig.ParseResult {
	if r.lbConfig == "" {
		return nil
	}
	if r.sc == nil || r.scFor != l.Settings {
		r.scFor = l.Settings
		var p registry.Policy
		if r.b.opts.policyLB != "" {
			p = l.Policy
		}
		if js := policyServiceConfig(p, r.lbConfig); js == "" {
			r.sc = &serviceconfig.ParseResult{Err: errors.New("no service config")}
		} else if r.sc = r.cc.ParseServiceConfig(js); r.sc == nil {
			r.sc = &serviceconfig.ParseResult{Err: errors.New("the ClientConn parses no service config")}
		} else if r.sc.Err != nil && !r.byDefault {
			r.log.Error("the channel's service config does not parse; none is handed", "error", r.sc.Err)
		}
	}
	if r.sc.Err != nil {
		return nil
	}
	return r.sc
}
