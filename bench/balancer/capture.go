package main

import (
	"encoding/json"
	"sync"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/serviceconfig"
)

// capture is a balancer that builds the policy registered as inner and
// keeps the last picker it publishes, so that pickers of real balancers,
// over real connections, can be benchmarked on their own.
type capture struct {
	inner string

	mu     sync.Mutex
	picker balancer.Picker
}

func (c *capture) Name() string { return "capture_" + c.inner }

func (c *capture) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return balancer.Get(c.inner).Build(recorder{ClientConn: cc, c: c}, opts)
}

func (c *capture) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	if p, ok := balancer.Get(c.inner).(balancer.ConfigParser); ok {
		return p.ParseConfig(js)
	}
	return nil, nil
}

func (c *capture) last() balancer.Picker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.picker
}

type recorder struct {
	balancer.ClientConn
	c *capture
}

func (r recorder) UpdateState(s balancer.State) {
	r.c.mu.Lock()
	r.c.picker = s.Picker
	r.c.mu.Unlock()
	r.ClientConn.UpdateState(s)
}

// captures holds one capture per policy, registered at initialization as
// balancer.Register requires.
var captures = map[string]*capture{}

func init() {
	for _, name := range policies {
		c := &capture{inner: name}
		captures[name] = c
		balancer.Register(c)
	}
}
