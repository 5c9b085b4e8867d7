package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster/registry"
)

// Weights of a rolled instance: registered with one, then changed to the
// other by an override (then drained by an override of 0).
const (
	rollWeight    = 10
	changedWeight = 20
)

// churn rolls the followed services: each of its slots takes one instance
// of a service through register, weight, drain and deregister, one step
// per turn, then starts again with a new instance of the next service.
// Turns come at the churn's rate, round robin over the slots; a slot whose
// last step is still under way when its turn comes skips it (counted as
// late).
type churn struct {
	regions  []registry.Store // where slot i rolls: regions[i % len]
	m        *matcher
	followed []string

	slots []churnSlot
	next  int // the slot whose turn is next
	seq   int // instances created so far

	wg                   sync.WaitGroup
	made, late, failures atomic.Int64
}

// churnSlot is one instance being rolled.
type churnSlot struct {
	busy    atomic.Bool
	region  int
	step    int // the next kind of change
	service string
	in      registry.Instance
}

func newChurn(regions []registry.Store, m *matcher, followed []string) *churn {
	c := &churn{regions: regions, m: m, followed: followed, slots: make([]churnSlot, 2*len(followed)*len(regions))}
	for i := range c.slots {
		c.slots[i].region = i % len(regions)
	}
	return c
}

// run makes changes at rate a second until ctx ends, and returns once the
// last one is answered.
func (c *churn) run(ctx context.Context, rate float64) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.wg.Wait()
			return
		case <-t.C:
			c.turn()
		}
	}
}

// turn makes the next slot's next change.
func (c *churn) turn() {
	s := &c.slots[c.next]
	idx := c.next
	c.next = (c.next + 1) % len(c.slots)
	if !s.busy.CompareAndSwap(false, true) {
		c.late.Add(1)
		return
	}
	if s.step == kindRegister {
		c.seq++
		s.service = c.followed[(idx+c.seq)%len(c.followed)]
		s.in = registry.Instance{
			Name: s.service, ID: fmt.Sprintf("roll-%d", c.seq), Weight: rollWeight,
			Addr: fmt.Sprintf("127.3.%d.%d:%d", c.seq/40000/256, c.seq/40000%256, 20000+c.seq%40000),
		}
	}
	ch := &change{kind: s.step, region: s.region, service: s.service, addr: s.in.Addr}
	switch s.step {
	case kindRegister:
		ch.want = rollWeight
	case kindWeight:
		ch.want = changedWeight
	case kindDrain:
		ch.want = 0
	case kindDeregister:
		ch.want = absent
	}
	s.step = (s.step + 1) % kinds
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer s.busy.Store(false)
		if err := c.apply(ch, s.in); err != nil {
			c.failures.Add(1)
			return
		}
		c.made.Add(1)
	}()
}

// apply makes one change, recording it with the matcher first.
func (c *churn) apply(ch *change, in registry.Instance) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch.at = time.Now()
	c.m.made(ch)
	st := c.regions[ch.region]
	switch ch.kind {
	case kindRegister:
		return st.Registrar().Register(ctx, in)
	case kindWeight, kindDrain:
		w := ch.want
		return st.Admin(registry.Actor{Who: "fleet"}).SetOverride(ctx, in.Name, in.ID, registry.Override{Weight: &w})
	default:
		return st.Registrar().Deregister(ctx, in.Name, in.ID)
	}
}
