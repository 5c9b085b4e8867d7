package etcd_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

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
	opts := []etcd.WatchOption{etcd.WithPrefix("/p"), etcd.WithProgressInterval(200 * time.Millisecond),
		etcd.WithRequestTimeout(time.Second), etcd.WithBackoff(50*time.Millisecond, 200*time.Millisecond), etcd.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}
	ctx := ctxFor(t, 90*time.Second)
	cs, err := etcd.NewCanaries(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	next := canaryReader(t, cs.WatchCanary(ctx, "svc"))
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
		if err := setThroughElection(ctx, c.Client(t, others...), want, writes("/p", etcd.WithRequestTimeout(time.Second))); err != nil {
			m.Heal()
			t.Fatal(err)
		}
		start := time.Now()
		next(want, bound)
		t.Logf("round %d (%s stalled): %v seen after %v", i, m.Name(), want, time.Since(start).Round(time.Millisecond))
		m.Heal()
	}
}

// setThroughElection sets svc's canary through cli, writing again while
// etcd elects a leader (retryElection).
func setThroughElection(ctx context.Context, cli *clientv3.Client, want registry.Canary, opts []etcd.WriteOption) error {
	return retryElection(ctx, func(ctx context.Context) error { return etcd.SetCanary(ctx, cli, "svc", want, opts...) })
}
