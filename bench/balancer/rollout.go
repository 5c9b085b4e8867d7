package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// rolloutPlan is the shape of a rolling deploy run.
type rolloutPlan struct {
	backends    int           // replaced one at a time
	concurrency int           // callers, each making one call after another
	steady      time.Duration // calls before the rollout, for the steady p99
	step        time.Duration // between two replacements
	drain       time.Duration // an old backend drained before it leaves and stops
	coldExtra   time.Duration // a new backend's added latency at its start...
	coldFor     time.Duration // ...decaying linearly to 0 over this
}

// rollout is the outcome of a rolling deploy run.
type rollout struct {
	steadyP99     time.Duration
	p50, p99      time.Duration // of the calls started during the rollout
	calls, failed int           // during the rollout
}

// callRecord is one call's start (since the run's start), latency and
// outcome.
type callRecord struct {
	at, took time.Duration
	failed   bool
}

// rollingDeploy runs a rolling deploy under calls through a channel with
// policy (its JSON config after a colon, as for dial): plan.backends warm
// backends registered an hour ago; after plan.steady of calls, each in
// turn is replaced by a cold one (startCold), listed as an instance
// registered now while the old one is listed as draining, then, after
// plan.drain, listed no more and stopped gracefully; a replacement every
// plan.step. The rollout lasts from the first replacement to plan.step
// after the last one.
func rollingDeploy(policy string, plan rolloutPlan) (rollout, error) {
	name, config, _ := strings.Cut(policy, ":")
	if config == "" {
		config = "{}"
	}
	old := time.Now().Add(-time.Hour)
	type member struct {
		b  *backend
		in registry.Instance
	}
	var members []member
	defer func() {
		for _, m := range members {
			m.b.stop()
		}
	}()
	for i := range plan.backends {
		b, err := startBackend()
		if err != nil {
			return rollout{}, err
		}
		members = append(members, member{b, registry.Instance{Name: "rollout", ID: fmt.Sprint("old-", i), Addr: b.addr, RegisteredAt: old}})
	}
	state := func() grpcresolver.State {
		eps := make([]grpcresolver.Endpoint, len(members))
		for i, m := range members {
			eps[i] = resolver.EndpointOf(m.in)
		}
		return grpcresolver.State{Endpoints: eps}
	}
	r := manual.NewBuilderWithScheme("rollout")
	r.InitialState(state())
	conn, err := grpc.NewClient("rollout:///bench", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:%s}]}`, name, config)))
	if err != nil {
		return rollout{}, err
	}
	defer conn.Close()
	seen := map[string]bool{}
	for deadline := time.Now().Add(10 * time.Second); len(seen) < plan.backends; {
		if time.Now().After(deadline) {
			return rollout{}, fmt.Errorf("%s: after 10s only %d of %d backends served a call", policy, len(seen), plan.backends)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if addr, err := call(ctx, conn); err == nil {
			seen[addr] = true
		}
		cancel()
	}

	start := time.Now()
	stop := make(chan struct{})
	records := make([][]callRecord, plan.concurrency)
	var wg sync.WaitGroup
	for g := range plan.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				_, err := call(ctx, conn, grpc.WaitForReady(true))
				cancel()
				records[g] = append(records[g], callRecord{at: t0.Sub(start), took: time.Since(t0), failed: err != nil})
			}
		}()
	}

	time.Sleep(plan.steady) // the steady phase's length
	rolloutFrom := time.Since(start)
	var mu sync.Mutex // guards members and the resolver's state against the stops below
	var stops sync.WaitGroup
	for i := range plan.backends {
		nb, err := startCold(plan.coldExtra, plan.coldFor)
		if err != nil {
			close(stop)
			wg.Wait()
			return rollout{}, err
		}
		mu.Lock()
		oldAddr := members[i].b.addr
		members[i].in.Draining = true
		members = append(members, member{nb, registry.Instance{Name: "rollout", ID: fmt.Sprint("new-", i), Addr: nb.addr, RegisteredAt: time.Now()}})
		r.UpdateState(state())
		mu.Unlock()
		stops.Add(1)
		go func() { // the old process: drained, then gone
			defer stops.Done()
			time.Sleep(plan.drain) // the drain's length
			mu.Lock()
			var gone *backend
			members = slices.DeleteFunc(members, func(m member) bool {
				if m.b.addr == oldAddr {
					gone = m.b
					return true
				}
				return false
			})
			r.UpdateState(state())
			mu.Unlock()
			gone.gracefulStop()
		}()
		time.Sleep(plan.step) // the rollout's pace
	}
	stops.Wait()
	rolloutTo := time.Since(start)
	close(stop)
	wg.Wait()

	var steadyLat, rollLat []time.Duration
	var out rollout
	for _, rs := range records {
		for _, c := range rs {
			switch {
			case c.at < rolloutFrom:
				if !c.failed {
					steadyLat = append(steadyLat, c.took)
				}
			case c.at < rolloutTo:
				out.calls++
				if c.failed {
					out.failed++
				} else {
					rollLat = append(rollLat, c.took)
				}
			}
		}
	}
	if len(steadyLat) == 0 || len(rollLat) == 0 {
		return rollout{}, fmt.Errorf("%s: no successful calls to measure (%d steady, %d during the rollout)", policy, len(steadyLat), len(rollLat))
	}
	slices.Sort(steadyLat)
	slices.Sort(rollLat)
	q := func(lat []time.Duration, p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	out.steadyP99, out.p50, out.p99 = q(steadyLat, 0.99), q(rollLat, 0.50), q(rollLat, 0.99)
	return out, nil
}
