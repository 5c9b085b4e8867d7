package etcd_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// TestCanaryWatchMovesOffAStalledMember stalls each member's client
// traffic in turn (its connections stay up and nothing answers, as with a
// frozen machine or a partition), changes the canary through the other
// members, and requires the change within a bound: 2.5 progress intervals
// of silence, then a Get and a watch that may land on the stalled member
// once more (each bounded by the request timeout), with backoff. One of the
// rounds stalls the member the watch is on (the watch moves only when its
// member goes silent), so without the silence detection that round never
// sees its change.
func TestCanaryWatchMovesOffAStalledMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("follower log:\n%s", logs.String())
		}
	})
	cli := c.Client(t) // all three members, through their proxies
	opts := []etcd.Option{etcd.WithPrefix("/p"), etcd.WithProgressInterval(200 * time.Millisecond),
		etcd.WithRequestTimeout(time.Second), etcd.WithBackoff(50*time.Millisecond, 200*time.Millisecond), etcd.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}
	ctx := ctxFor(t, 90*time.Second)
	cs, err := etcd.NewCanaries(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ch := cs.WatchCanary(ctx, "svc")
	next := func(want registry.Canary, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case got := <-ch:
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("canary %+v not seen within %v", want, within)
			}
		}
	}
	next(registry.Canary{}, 10*time.Second)
	const bound = 6 * time.Second // silence 0.5 s, up to two attempts of 1 s on the stalled member, backoff
	for i, m := range c.Members() {
		var others []string
		for _, o := range c.Members() {
			if o != m {
				others = append(others, o.DirectEndpoint())
			}
		}
		m.Stall()
		want := registry.Canary{Color: "blue", Percent: float64(10 + i)}
		if err := setThroughElection(ctx, c.Client(t, others...), want, opts); err != nil {
			m.Heal()
			t.Fatal(err)
		}
		start := time.Now()
		next(want, bound)
		t.Logf("round %d (%s stalled): %v seen after %v", i, m.Name(), want, time.Since(start).Round(time.Millisecond))
		m.Heal()
	}
}

// setThroughElection sets svc's canary through cli, writing again for up
// to 10 s while etcd answers "leader changed" or "no leader": the stall
// holds client traffic only, but on a loaded machine the new cluster's
// members may still elect a leader again (once under two CPU-bound loops,
// a write 0.15 s into the test was caught in an election).
func setThroughElection(ctx context.Context, cli *clientv3.Client, want registry.Canary, opts []etcd.Option) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := etcd.SetCanary(ctx, cli, "svc", want, opts...)
		if err == nil || time.Now().After(deadline) ||
			!(errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrNoLeader)) {
			return err
		}
		pause := time.NewTimer(50 * time.Millisecond) // an election has no event to await here
		select {
		case <-ctx.Done():
			pause.Stop()
			return err
		case <-pause.C:
		}
	}
}
