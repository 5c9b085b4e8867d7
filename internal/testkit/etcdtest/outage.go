package etcdtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// StopAll stops every running member: a whole-cluster outage. The proxies
// stay up and reset every new connection, so clients see a cluster whose
// processes are down: connections fail at once.
func (c *Cluster) StopAll(t testing.TB) {
	t.Helper()
	for _, m := range c.members {
		if m.Running() {
			m.Stop(t)
		}
	}
}

// RestartAll restarts every stopped member at once, as a cluster recovering
// from an outage does (one member alone cannot serve without a quorum), and
// waits until each serves a linearizable read.
func (c *Cluster) RestartAll(t testing.TB) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i, m := range c.members {
		if m.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.restart(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", m.name, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("etcdtest: RestartAll: %v", err)
	}
}
