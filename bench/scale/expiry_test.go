package scale_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// defaultWindow is the resolver's default protection window; the
// benchmark uses the default and only bounds its waits with it.
const defaultWindow = 30 * time.Second

// BenchmarkMassExpiry lets -expiry.keys keys of one service expire, each
// on its own lease (granted in parallel, TTL -expiry.ttl), as when every
// server of a large service loses etcd at once, and follows the expiry
// three ways in the same run:
//
//   - a raw etcd watch of the service's deletes: when etcd revoked each
//     lease (it revokes about 1,000 a second, so the expiry arrives as a
//     trickle);
//   - a Discovery watcher: the live list the registry shows;
//   - a real gRPC channel on muster:/// through resolver.Builder with the
//     default empty-list protection (fraction 0.5 over 30s), whose balancer
//     records the size of every state it gets and dials nothing: the list
//     clients are served.
//
// It fails if the channel is ever served fewer than half the keys before
// the last delete, and reports the trickle's length and rate, the smallest
// list served during it, the updates protection withheld, and when
// protection lifted (a window after it started, as designed, since no
// server comes back). Run with -benchtime 1x.
func BenchmarkMassExpiry(b *testing.B) {
	for range b.N {
		massExpiry(b, *expiryKeys, *expiryTTL)
	}
}

func massExpiry(b *testing.B, n int, ttl time.Duration) {
	const svc = "expiring"
	c := etcdtest.Start(b, etcdtest.WithProcesses())
	cli := c.Client(b, c.DirectEndpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	start := time.Now()
	leases := grantLeases(ctx, b, cli, n, ttl)
	granted := time.Since(start)
	_, rev := fill(b, cli, []string{svc}, n, func(k int) clientv3.LeaseID { return leases[k] })
	written := time.Since(start)

	// The deletes, as etcd makes them.
	deletes := newTimeline()
	wctx, stopWatch := context.WithCancel(ctx)
	wch := cli.Watch(wctx, registry.ServicePrefix(registry.DefaultPrefix, svc), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	var wg sync.WaitGroup
	wg.Go(func() {
		total := 0
		for resp := range wch {
			total += len(resp.Events)
			deletes.add(point{at: time.Now(), n: total})
		}
	})

	// The live list, as the Discovery has it.
	d, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	w, err := d.Watch(ctx, svc)
	if err != nil {
		b.Fatal(err)
	}
	live := newTimeline()
	wg.Go(func() {
		for range w.Updates() {
			s := w.Snapshot()
			live.add(point{at: time.Now(), n: len(s.Instances), stale: s.Stale()})
		}
	})

	// The list a channel is served.
	served := newTimeline()
	bld := resolver.NewBuilder(d, resolver.WithLogger(quiet))
	conn := openRecordedChannel(b, bld, "muster:///"+svc, served)
	served.wait(b, 2*time.Minute, "the channel's first full list", func(p point) bool { return p.n == n })
	loaded := time.Now()

	timeout := ttl + time.Duration(n/200)*time.Second + 2*time.Minute
	deletes.wait(b, timeout, fmt.Sprintf("%d deletes", n), func(p point) bool { return p.n >= n })
	dels := deletes.all()
	first, last := dels[0].at, dels[len(dels)-1].at
	if first.Before(loaded) {
		b.Fatalf("the leases began to expire %v before the channel had every instance (setup took %v): raise -expiry.ttl", loaded.Sub(first), loaded.Sub(start))
	}
	// With no server coming back, protection lifts a window after it
	// started: the channel is then served the empty list.
	lift := served.wait(b, last.Sub(first)+defaultWindow+time.Minute, "protection lifting to the empty list", func(p point) bool { return p.n == 0 })

	states := served.all()
	minServed, protectedAt := n, time.Time{}
	for _, p := range states {
		if p.at.After(last) {
			break
		}
		if p.at.After(first) && p.n < minServed {
			minServed, protectedAt = p.n, p.at
		}
	}
	lives := live.all()
	stale := 0
	for _, p := range lives {
		if p.stale {
			stale++
		}
	}
	trickle := last.Sub(first)
	b.Logf("%d keys: leases granted in %v (%.0f/s), keys written %v after the start, channel loaded %v after the start; first delete %v after that",
		n, granted.Round(time.Millisecond), float64(n)/granted.Seconds(), written.Round(time.Millisecond), loaded.Sub(start).Round(time.Millisecond), first.Sub(loaded).Round(time.Millisecond))
	b.Logf("trickle: %d deletes in %v (%.0f/s) over %d watch responses; smallest list served during it %d (%.2f of %d, last accepted at %.1fs); %d updates withheld; lifted to %d at %.1fs (%.1fs after the last delete); %d stale snapshots",
		n, trickle.Round(time.Millisecond), float64(n)/trickle.Seconds(), len(dels), minServed, float64(minServed)/float64(n), n,
		protectedAt.Sub(first).Seconds(), bld.Stats().Protected, lift.n, lift.at.Sub(first).Seconds(), lift.at.Sub(last).Seconds(), stale)
	b.Logf("%s", describe(first, lift.at, n, dels, lives, states))

	_ = conn.Close()
	_ = w.Close()
	stopWatch()
	wg.Wait()
	_ = d.Close()

	if float64(minServed) < 0.5*float64(n) {
		b.Errorf("the channel was served %d of %d instances during the expiry; protection should hold at least half", minServed, n)
	}
	b.ReportMetric(trickle.Seconds(), "trickle-s")
	b.ReportMetric(float64(n)/trickle.Seconds(), "deletes/s")
	b.ReportMetric(float64(minServed)/float64(n), "served-min/keys")
	b.ReportMetric(lift.at.Sub(last).Seconds(), "lift-after-trickle-s")
	b.ReportMetric(float64(bld.Stats().Protected), "withheld")
	b.ReportMetric(float64(stale), "stale-snapshots")
	b.ReportMetric(float64(n)/granted.Seconds(), "grants/s")
	b.ReportMetric(0, "ns/op")
}

// describe returns the expiry second by second (every fifth second): keys
// deleted so far, the Discovery's live list, the list the channel is
// served.
func describe(from, to time.Time, n int, dels, lives, states []point) string {
	var sb strings.Builder
	sb.WriteString("t(s)  deleted  live  served")
	for t := time.Duration(0); from.Add(t).Before(to.Add(5 * time.Second)); t += 5 * time.Second {
		x := from.Add(t)
		fmt.Fprintf(&sb, "\n%4.0f  %7d  %5d  %6d", t.Seconds(), at(dels, x, 0), at(lives, x, n), at(states, x, n))
	}
	return sb.String()
}

// grantLeases grants n leases of the given TTL, 32 at a time.
func grantLeases(ctx context.Context, b *testing.B, cli *clientv3.Client, n int, ttl time.Duration) []clientv3.LeaseID {
	leases := make([]clientv3.LeaseID, n)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && failed.Load() == nil; i = int(next.Add(1) - 1) {
				resp, err := cli.Grant(ctx, int64(ttl.Seconds()))
				if err != nil {
					failed.Store(&err)
					return
				}
				leases[i] = resp.ID
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatalf("grant leases: %v", *err)
	}
	return leases
}

// openRecordedChannel opens a real channel on target, resolved by bld,
// whose balancer adds the size of every state it gets to rec and dials
// nothing.
func openRecordedChannel(b *testing.B, bld *resolver.Builder, target string, rec *timeline) *grpc.ClientConn {
	const name = "muster_scale_recorder"
	balancer.Register(recorderBuilder{name: name, rec: rec}) // replaces the last run's
	conn, err := grpc.NewClient(target, grpc.WithResolvers(bld),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+name+`":{}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	conn.Connect()
	return conn
}

type recorderBuilder struct {
	name string
	rec  *timeline
}

func (r recorderBuilder) Build(balancer.ClientConn, balancer.BuildOptions) balancer.Balancer {
	return recorder{rec: r.rec}
}
func (r recorderBuilder) Name() string { return r.name }

// recorder is a balancer that records the size of each state and dials
// nothing.
type recorder struct{ rec *timeline }

func (r recorder) UpdateClientConnState(s balancer.ClientConnState) error {
	r.rec.add(point{at: time.Now(), n: len(s.ResolverState.Endpoints)})
	return nil
}
func (recorder) ResolverError(error)                                        {}
func (recorder) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (recorder) Close()                                                     {}
func (recorder) ExitIdle()                                                  {}
