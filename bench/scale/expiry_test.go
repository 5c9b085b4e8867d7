package scale_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// BenchmarkMassExpiry lets -expiry.keys keys expire, each on its own lease
// (granted in parallel, TTL -expiry.ttl), as when every server loses etcd
// at once. The keys belong to -expiry.services services (evenly; their
// leases interleaved, so that each service's keys expire throughout the
// expiry, not one service after another). The expiry is followed three
// ways in the same run:
//
//   - a raw etcd watch of the deletes: when etcd revoked each lease (it
//     revokes about 1,000 a second, so the expiry arrives as a trickle);
//   - a Discovery watcher per followed service: the live list the
//     registry shows;
//   - a real gRPC channel on muster:/// per followed service (the first
//     -expiry.channels), through one resolver.Builder with the default
//     empty-list protection (fraction 0.5 over 30s), whose balancer records
//     the size of every state it gets and dials nothing: the list clients
//     are served.
//
// It fails if a channel is served fewer than half its service's instances
// before the last delete, and reports the trickle's length and rate, the
// smallest share of a service served during it, the updates protection
// withheld, and when protection lifted (a window after the last delete, as
// designed, since no server comes back). Run with -benchtime 1x -v (-v
// shows the whole timeline).
func BenchmarkMassExpiry(b *testing.B) {
	for range b.N {
		massExpiry(b, *expiryKeys, *expiryServices, min(*expiryChannels, *expiryServices), *expiryTTL)
	}
}

// followed is one service followed through the expiry.
type followed struct {
	name         string
	w            registry.Watcher
	live, served *timeline
	conn         *grpc.ClientConn
	minServed    int
	lastAccepted time.Time // of the smallest list served during the trickle
	lift         point
}

func massExpiry(b *testing.B, n, nServices, nChannels int, ttl time.Duration) {
	if n%nServices != 0 {
		b.Fatalf("-expiry.keys %d is not a multiple of -expiry.services %d", n, nServices)
	}
	per := n / nServices
	c := etcdtest.Start(b, etcdtest.WithProcesses())
	cli := c.Client(b, c.DirectEndpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	start := time.Now()
	leases := grantLeases(ctx, b, cli, n, ttl)
	granted := time.Since(start)
	// Leases expire in the order they were granted: instance i of service
	// j gets lease i*nServices+j, so the services lose keys side by side.
	services := serviceNames(nServices)
	_, rev := fill(b, cli, services, per, func(k int) clientv3.LeaseID { return leases[(k%per)*nServices+k/per] })
	written := time.Since(start)

	// The deletes, as etcd makes them.
	deletes := newTimeline()
	wctx, stopWatch := context.WithCancel(ctx)
	wch := cli.Watch(wctx, registry.DefaultPrefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	var wg sync.WaitGroup
	wg.Go(func() {
		total := 0
		for resp := range wch {
			total += len(resp.Events)
			deletes.add(point{at: time.Now(), n: total})
		}
	})

	d, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	bld := resolver.NewBuilder(d, resolver.WithLogger(quiet))
	fs := make([]*followed, nChannels)
	for i := range fs {
		f := &followed{name: services[i], live: newTimeline(), served: newTimeline(), minServed: per}
		// The live list, as the Discovery has it.
		if f.w, err = d.Watch(ctx, f.name); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			for range f.w.Updates() {
				s := f.w.Snapshot()
				f.live.add(point{at: time.Now(), n: len(s.Instances), stale: s.Stale()})
			}
		})
		// The list a channel is served.
		f.conn = openRecordedChannel(b, bld, f.name, f.served)
		fs[i] = f
	}
	for _, f := range fs {
		f.served.wait(b, 2*time.Minute, f.name+": the channel's first full list", func(p point) bool { return p.n == per })
	}
	loaded := time.Now()
	cpuLoaded := cpuTime(b)
	statsLoaded := d.Stats()

	timeout := ttl + time.Duration(n/200)*time.Second + 2*time.Minute
	deletes.wait(b, timeout, fmt.Sprintf("%d deletes", n), func(p point) bool { return p.n >= n })
	cpu := cpuTime(b) - cpuLoaded // the client's: etcd runs in another process
	dels := deletes.all()
	first, last := dels[0].at, dels[len(dels)-1].at
	if first.Before(loaded) {
		b.Fatalf("the leases began to expire %v before the channels had every instance (setup took %v): raise -expiry.ttl", loaded.Sub(first), loaded.Sub(start))
	}
	trickle := last.Sub(first)
	b.Logf("%d keys over %d services: leases granted in %v (%.0f/s), keys written %v after the start, %d channels loaded %v after the start; first delete %v after that",
		n, nServices, granted.Round(time.Millisecond), float64(n)/granted.Seconds(), written.Round(time.Millisecond), nChannels,
		loaded.Sub(start).Round(time.Millisecond), first.Sub(loaded).Round(time.Millisecond))
	b.Logf("trickle: %d deletes in %v (%.0f/s) over %d watch responses; CPU of the client process (Discovery, resolver, channels, raw watch) %v (%.0f%% of one core)",
		n, trickle.Round(time.Millisecond), float64(n)/trickle.Seconds(), len(dels), cpu.Round(time.Millisecond), 100*cpu.Seconds()/trickle.Seconds())

	worst, stale := 1.0, 0
	for _, f := range fs {
		for _, p := range f.served.all() {
			if p.at.After(last) {
				break
			}
			if p.at.After(first) && p.n < f.minServed {
				f.minServed, f.lastAccepted = p.n, p.at
			}
		}
		for _, p := range f.live.all() {
			if p.stale {
				stale++
			}
		}
		worst = min(worst, float64(f.minServed)/float64(per))
	}
	if worst < 0.5 {
		b.Errorf("a channel was served %.2f of its instances during the expiry; protection should hold at least half", worst)
	}
	for _, f := range fs {
		if worst >= 0.5 {
			// With no server coming back, protection lifts a window after
			// the last loss: the channel is then served the empty list.
			f.lift = f.served.wait(b, trickle+defaultWindow+time.Minute, f.name+": protection lifting to the empty list", func(p point) bool { return p.n == 0 })
		}
		lifted := "protection not waited for"
		if !f.lift.at.IsZero() {
			lifted = fmt.Sprintf("served %d at %.1fs (%.1fs after the last delete)", f.lift.n, f.lift.at.Sub(first).Seconds(), f.lift.at.Sub(last).Seconds())
		}
		b.Logf("%s: smallest list served during the trickle %d of %d (%.2f, accepted at %.1fs); %s",
			f.name, f.minServed, per, float64(f.minServed)/float64(per), f.lastAccepted.Sub(first).Seconds(), lifted)
	}
	end := fs[0].lift.at
	if end.IsZero() {
		end = last
	}
	// The Discovery has caught up by now (the live lists are empty): it
	// applies the watch responses queued behind one before publishing.
	st := d.Stats()
	responses, snapshots := st.WatchResponses-statsLoaded.WatchResponses, st.Changes-statsLoaded.Changes
	b.Logf("%d updates withheld by protection over %d channels; %d stale snapshots; the Discovery applied %d watch responses in %d snapshots\n%s",
		bld.Stats().Protected, nChannels, stale, responses, snapshots,
		describe(first, end, per, dels, fs[0].live.all(), fs[0].served.all()))

	for _, f := range fs {
		_ = f.conn.Close()
		_ = f.w.Close()
	}
	stopWatch()
	wg.Wait()
	_ = d.Close()

	b.ReportMetric(trickle.Seconds(), "trickle-s")
	b.ReportMetric(float64(n)/trickle.Seconds(), "deletes/s")
	b.ReportMetric(worst, "served-min/keys")
	b.ReportMetric(fs[0].lift.at.Sub(last).Seconds(), "lift-after-trickle-s")
	b.ReportMetric(float64(bld.Stats().Protected), "withheld")
	b.ReportMetric(float64(stale), "stale-snapshots")
	b.ReportMetric(float64(snapshots), "snapshots")
	b.ReportMetric(float64(n)/granted.Seconds(), "grants/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "client-cpu-µs/delete")
	b.ReportMetric(0, "ns/op")
}

// describe returns the expiry every fifth second: keys deleted so far (of
// all services), one service's live list in the Discovery and the list its
// channel is served.
func describe(from, to time.Time, n int, dels, lives, states []point) string {
	var sb strings.Builder
	sb.WriteString("t(s)  deleted  live  served")
	for t := time.Duration(0); from.Add(t).Before(to.Add(5 * time.Second)); t += 5 * time.Second {
		x := from.Add(t)
		fmt.Fprintf(&sb, "\n%4.0f  %7d  %5d  %6d", t.Seconds(), at(dels, x, 0), at(lives, x, n), at(states, x, n))
	}
	return sb.String()
}

// cpuTime returns the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// openRecordedChannel opens a real channel on muster:///service, resolved
// by bld, whose balancer adds the size of every state it gets to rec and
// dials nothing.
func openRecordedChannel(b *testing.B, bld *resolver.Builder, service string, rec *timeline) *grpc.ClientConn {
	name := "muster_scale_recorder_" + service
	balancer.Register(recorderBuilder{name: name, rec: rec}) // replaces the last run's
	conn, err := grpc.NewClient("muster:///"+service, grpc.WithResolvers(bld),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+name+`":{}}]}`), grpc.WithDisableServiceConfig())
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
