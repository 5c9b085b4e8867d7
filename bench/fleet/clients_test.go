package fleet_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdnaming "go.etcd.io/etcd/client/v3/naming/resolver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/resolvertest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/clusters"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// The client tiers.
const (
	tierMuster = "muster"
	tierNaming = "etcd-naming"
	tierADS    = "ads"
)

// Observer IDs: the tier's letter and the channel's or stream's number.
func musterObserver(j int) string { return fmt.Sprintf("m%d", j) }
func namingObserver(j int) string { return fmt.Sprintf("n%d", j) }
func adsObserver(j int) string    { return fmt.Sprintf("x%d", j) }

// runClients is the client process: cfg.Channels muster:/// channels on
// one Discovery and cfg.NamingChannels etcd:/// channels of etcd's naming
// resolver, each on one of cfg.Followed. It prints "heap before <bytes>"
// before opening them, "ready <observer>" when each has its service's
// list, "heap muster <bytes> <instances>" once the muster:/// channels
// have theirs (instances: summed over the channels), then "heap naming
// ..." for the etcd:/// channels, then a diffLine for every change a
// channel is handed, until ctx ends.
func runClients(ctx context.Context, cfg roleConfig, out *lineWriter) error {
	d, closeDiscovery, err := openDiscovery(cfg.Regions)
	if err != nil {
		return err
	}
	defer closeDiscovery()
	rb, err := resolver.New(d, resolver.WithLogger(quiet))
	if err != nil {
		return err
	}
	out.printf("heap before %d", liveHeap())

	var waiting sync.WaitGroup
	// Every channel balances with muster_p2c: Muster's resolver names it,
	// and the etcd:/// channels run it as their default service config, so
	// that the two tiers differ by their resolvers only.
	p2c := grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{}}]}`)
	open := func(id, target string, expect int, b grpcresolver.Builder) (*grpc.ClientConn, error) {
		v := &view{expect: expect}
		var mu sync.Mutex
		if expect == 0 {
			// A resolver may hand no state for an empty prefix: the
			// view is complete as it is.
			v.ready = true
			out.printf("ready %s", id)
		} else {
			waiting.Add(1)
		}
		rec := resolvertest.RecordingBuilder{Builder: b, OnState: func(s grpcresolver.State, at time.Time) {
			now := stateView(s)
			mu.Lock()
			diffs, ready := v.update(now)
			mu.Unlock()
			if ready {
				out.printf("ready %s", id)
				waiting.Done()
			}
			lines := make([]string, len(diffs))
			for i, df := range diffs {
				lines[i] = diffLine(id, df, at)
			}
			out.lines(lines)
		}}
		conn, err := grpc.NewClient(target, grpc.WithResolvers(rec), p2c, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		conn.Connect()
		return conn, nil
	}
	// channelInstances is how many instances n channels over the
	// followed services are handed in all.
	channelInstances := func(n int, expect map[string]int) int {
		total := 0
		for j := range n {
			total += expect[cfg.Followed[j%len(cfg.Followed)]]
		}
		return total
	}
	var conns []*grpc.ClientConn
	for j := range cfg.Channels {
		s := cfg.Followed[j%len(cfg.Followed)]
		conn, err := open(musterObserver(j), "muster:///"+s, cfg.Expect[s], rb)
		if err != nil {
			return err
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	waiting.Wait()
	settle(ctx, conns)
	out.printf("heap muster %d %d", liveHeap(), channelInstances(cfg.Channels, cfg.Expect))
	if cfg.NamingChannels > 0 {
		ncli, err := clientv3.New(etcd.ClientConfig(cfg.Regions[0]...))
		if err != nil {
			return err
		}
		defer ncli.Close()
		nb, err := etcdnaming.NewBuilder(ncli)
		if err != nil {
			return err
		}
		for j := range cfg.NamingChannels {
			s := cfg.Followed[j%len(cfg.Followed)]
			conn, err := open(namingObserver(j), "etcd:///"+s, cfg.ExpectFirst[s], nb)
			if err != nil {
				return err
			}
			defer conn.Close()
			conns = append(conns, conn)
		}
		waiting.Wait()
		settle(ctx, conns[cfg.Channels:])
	}
	out.printf("heap naming %d %d", liveHeap(), channelInstances(cfg.NamingChannels, cfg.ExpectFirst))
	<-ctx.Done()
	return nil
}

// settle waits until every channel has tried every address and failed
// (nothing listens on them), so that the heap is measured without
// connection attempts in flight; at most 10 seconds.
func settle(ctx context.Context, conns []*grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, c := range conns {
		for st := c.GetState(); st != connectivity.TransientFailure; st = c.GetState() {
			if !c.WaitForStateChange(ctx, st) {
				return
			}
		}
	}
}

// stateView is a channel's state as a view: weight by address, 0 for a
// drained instance (Muster's resolver hands each endpoint its instance;
// etcd's naming resolver hands addresses only, weight 1).
func stateView(s grpcresolver.State) map[string]int {
	v := make(map[string]int, max(len(s.Endpoints), len(s.Addresses)))
	for _, ep := range s.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		w := 1
		if in, ok := resolver.InstanceOf(ep); ok {
			w = in.EffectiveWeight()
		}
		v[ep.Addresses[0].Addr] = w
	}
	if len(s.Endpoints) == 0 {
		for _, a := range s.Addresses {
			v[a.Addr] = 1
		}
	}
	return v
}

// liveHeap is the bytes of live heap objects once garbage is collected
// (twice: what gRPC pools goes at the second), freed memory returned to
// the system.
func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// openDiscovery opens a Discovery of each region on an etcd client of its
// own, as a process has, and with several regions their union
// (registry/clusters, each region's instances in region "rN"); closing
// closes them all.
func openDiscovery(regions [][]string) (registry.Discovery, func(), error) {
	var closers []io.Closer
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			_ = c.Close()
		}
	}
	var parts []clusters.Cluster
	for r, endpoints := range regions {
		cli, err := clientv3.New(etcd.ClientConfig(endpoints...))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, cli)
		d, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, d)
		parts = append(parts, clusters.Cluster{Name: fmt.Sprintf("r%d", r), Region: fmt.Sprintf("r%d", r), Discovery: d})
	}
	if len(parts) == 1 {
		return parts[0].Discovery, closeAll, nil
	}
	u, err := clusters.New(parts...)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	closers = append(closers, u)
	return u, closeAll, nil
}
