package reliability_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
)

var chaosSeed = flag.Uint64("chaos.seed", 0, "seed of the chaos soak (0: a new one)")

// Fault 7: a chaos soak. Members are stopped and restarted (a quorum may be
// lost for a while), stalled (partitioned), reset (refusing connections),
// delayed; the store is compacted; one
// instance keeps registering and deregistering. Throughout: no key without
// a lease, no instance under two keys (the audit), and no failed call, since
// every backend stays up. When the faults stop, every registered instance
// is discoverable within the bound.
func TestChaosSoak(t *testing.T) {
	const (
		healBound = 10 * time.Second
		workers   = 4
	)
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos soak seed %d: rerun with -run TestChaosSoak -chaos.seed=%d", seed, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t.Logf("chaos soak for %v, seed %d", *soak, seed)

	w := newWorld(t)
	bs := []*backend{w.startBackend(t, "a"), w.startBackend(t, "b"), w.startBackend(t, "c")}
	churn := w.startBackend(t, "churn")
	churnIn := registry.Instance{Name: "greeter", ID: "churn", Addr: churn.be.Addr}
	churnRegistered := true
	conn := w.dial(t)
	load := testbackend.StartLoad(conn, workers)
	for _, x := range append(bs, churn) {
		load.WaitFor(t, x.be.Addr)
	}
	audit := registrytest.StartAudit(w.cli, registry.DefaultPrefix)

	members := w.c.Members()
	actions := map[string]int{}
	end := time.Now().Add(*soak)
	for time.Now().Before(end) {
		m := members[rng.IntN(len(members))]
		switch n := rng.IntN(10); {
		case n < 2: // stop or restart a member
			if m.Running() {
				running := 0
				for _, x := range members {
					if x.Running() {
						running++
					}
				}
				if running > 1 {
					m.Stop(t)
					actions["stop"]++
				}
			} else {
				w.c.RestartAll(t)
				actions["restart"]++
			}
		case n < 3:
			m.Stall()
			actions["stall"]++
			pause(rng, 200, 1500)
			m.Heal()
		case n < 4:
			m.Reset()
			actions["reset"]++
			pause(rng, 200, 1500)
			m.Heal()
		case n < 5:
			m.Delay(time.Duration(50+rng.IntN(250)) * time.Millisecond)
			actions["delay"]++
			pause(rng, 200, 1500)
			m.Heal()
		case n < 6:
			if allRunning(members) {
				w.c.Compact(t)
				actions["compact"]++
			}
		default: // churn: register or deregister, without waiting for etcd
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			if churnRegistered {
				_ = churn.reg.Deregister(ctx, churnIn.Name, churnIn.ID)
			} else {
				_ = churn.reg.Register(ctx, churnIn)
			}
			cancel()
			churnRegistered = !churnRegistered
			actions["churn"]++
		}
		pause(rng, 50, 300)
	}
	// The faults stop.
	for _, m := range members {
		m.Heal()
	}
	w.c.RestartAll(t)
	healed := time.Now()
	want := []string{"a", "b", "c"}
	if churnRegistered {
		want = append(want, "churn")
	}
	wt := w.watch(t)
	registrytest.WaitForWithin(t, wt, healBound, fmt.Sprintf("%v discoverable after the faults", want), func(s registry.Snapshot) bool {
		return registrytest.HasIDs(want...)(s) && !s.Stale()
	})
	took := time.Since(healed)
	total, failures := load.Finish()
	reads := audit.Stop(t)
	t.Logf("actions %v; healed in %s; %d calls, %d failed; %d audit reads", actions, fmtDur(took), total, len(failures), reads)
	if len(failures) > 0 {
		t.Fatalf("%d calls failed while every backend was up; first: %v", len(failures), failures[0])
	}
}

func allRunning(ms []*etcdtest.Member) bool {
	for _, m := range ms {
		if !m.Running() {
			return false
		}
	}
	return true
}

// pause waits a random time between lo and hi milliseconds: the pacing of
// the chaos, not synchronisation.
func pause(rng *rand.Rand, lo, hi int) {
	time.Sleep(time.Duration(lo+rng.IntN(hi-lo)) * time.Millisecond)
}
