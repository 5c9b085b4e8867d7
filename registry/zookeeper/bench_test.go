package zookeeper_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/resolvertest"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/zookeeper"
	"github.com/musterhq/muster/resolver"
)

// BenchmarkRegisterToChannel measures how long Registrar.Register takes to
// reach a gRPC channel resolving "muster:///svc" through a Discovery, one
// registration at a time, for ZooKeeper (a standalone server) and etcd (an
// embedded member) on the same machine in the same run: the two paths take
// turns within each iteration, in a rotating order. It reports p50 and
// p99 per path and the ratio of the p50s. Run with -benchtime 300x or
// more.
func BenchmarkRegisterToChannel(b *testing.B) {
	zc := zktest.Start(b)
	ec := etcdtest.Start(b)
	cli := ec.Client(b, ec.DirectEndpoints()...)
	prefix := fmt.Sprintf("/bench-%d", time.Now().UnixNano())

	zr, err := zookeeper.NewRegistrar(zc.DirectAddrs(), zookeeper.WithRoot(prefix), zookeeper.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = zr.Close() })
	zd, err := zookeeper.NewDiscovery(zc.DirectAddrs(), zookeeper.WithRoot(prefix), zookeeper.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = zd.Close() })
	er, err := etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = er.Close() })
	ed, err := etcd.NewDiscovery(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ed.Close() })

	p50 := registrytest.SideBySide(b,
		registrytest.Path{Name: "zk-floor", Once: zkFloor(b, zc.DirectAddrs(), prefix+"-floor")},
		registrytest.Path{Name: "zookeeper", Once: channelPath(b, zr, zd)},
		registrytest.Path{Name: "etcd", Once: channelPath(b, er, ed)},
	)
	b.ReportMetric(float64(p50["zookeeper"])/float64(p50["etcd"]), "zookeeper/etcd")
	b.ReportMetric(float64(p50["zookeeper"])/float64(p50["zk-floor"]), "zookeeper/zk-floor")
}

// zkFloor is the floor of the ZooKeeper path: a raw ephemeral Create seen
// by a raw children watch of the same client (armed again after each
// event).
func zkFloor(b *testing.B, servers []string, parent string) func(int) time.Duration {
	c := rawConn(b, servers)
	if _, err := c.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	return func(i int) time.Duration {
		_, _, ch, err := c.ChildrenW(parent)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := c.Create(fmt.Sprintf("%s/%06d", parent, i), []byte("x"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			b.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			b.Fatalf("child %d not seen within 10s", i)
		}
		return time.Since(start)
	}
}

// channelPath opens a channel on muster:///svc through d and returns the
// once function that registers instance i with r and waits for the
// channel's state with i+1 endpoints.
func channelPath(b *testing.B, r registry.Registrar, d registry.Discovery) func(int) time.Duration {
	seen := registrytest.NewArrivals()
	bld := resolvertest.RecordingBuilder{Builder: resolver.NewBuilder(d, resolver.WithLogger(quiet)), OnUpdate: seen.Mark}
	conn, err := grpc.NewClient("muster:///svc", grpc.WithResolvers(grpcresolver.Builder(bld)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	conn.Connect()
	b.Cleanup(func() { _ = conn.Close() })
	seen.Wait(b, 0)
	return func(i int) time.Duration {
		start := time.Now()
		in := registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if err := r.Register(context.Background(), in); err != nil {
			b.Fatal(err)
		}
		return seen.Wait(b, i+1).Sub(start)
	}
}

// BenchmarkServiceLoad measures a Discovery's first load of a service of
// 1,000 instances in a standalone server (the time from Watch to the
// loaded snapshot of all of them, a new Discovery each iteration), beside
// two raw reads of the same nodes by one client in the same run: the
// children list then each value one after the other ("raw-sequential"),
// and the same with the values read concurrently ("raw-concurrent", 64 at
// a time, as the Discovery does). Run with -benchtime 20x or more.
func BenchmarkServiceLoad(b *testing.B) {
	const n = 1000
	zc := zktest.Start(b)
	root := fmt.Sprintf("/bench-%d", time.Now().UnixNano())
	r, err := zookeeper.NewRegistrar(zc.DirectAddrs(), zookeeper.WithRoot(root), zookeeper.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- r.Register(ctx, registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	raw := rawConn(b, zc.DirectAddrs())
	parent := root + "/svc"
	rawRead := func(concurrent int) func(int) time.Duration {
		return func(int) time.Duration {
			start := time.Now()
			ids, _, err := raw.Children(parent)
			if err != nil {
				b.Fatal(err)
			}
			zookeeper.UpTo(len(ids), concurrent, func(i int) {
				if _, _, err := raw.Get(parent + "/" + ids[i]); err != nil {
					b.Error(err)
				}
			})
			if len(ids) != n {
				b.Fatalf("%d children, want %d", len(ids), n)
			}
			return time.Since(start)
		}
	}
	load := func(int) time.Duration {
		d, err := zookeeper.NewDiscovery(zc.DirectAddrs(), zookeeper.WithRoot(root), zookeeper.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		// The connection's own handshake is left out: the clock starts
		// once the Discovery has a session.
		if _, err := d.Services(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		w, err := d.Watch(ctx, "svc")
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		registrytest.WaitFor(b, w, "all instances loaded", func(s registry.Snapshot) bool { return s.Loaded && len(s.Instances) == n })
		return time.Since(start)
	}
	p50 := registrytest.SideBySide(b,
		registrytest.Path{Name: "raw-sequential", Once: rawRead(1)},
		registrytest.Path{Name: "raw-concurrent", Once: rawRead(64)},
		registrytest.Path{Name: "discovery", Once: load},
	)
	b.ReportMetric(float64(p50["discovery"])/float64(p50["raw-concurrent"]), "discovery/raw-concurrent")
	b.ReportMetric(float64(p50["discovery"])/float64(p50["raw-sequential"]), "discovery/raw-sequential")
}

// BenchmarkRegistration measures one Registrar registering 1,000 instances
// at once (1,000 concurrent Register calls, from the first call to the
// last return; a new Registrar, so a new session, each iteration, with one
// instance registered before the clock starts), beside
// raw ephemeral Creates of as many nodes by one client in the same run,
// one after the other ("raw-sequential") and 64 at a time
// ("raw-concurrent", as the Registrar does). Run with -benchtime 10x or
// more.
func BenchmarkRegistration(b *testing.B) {
	const n = 1000
	zc := zktest.Start(b)
	root := fmt.Sprintf("/bench-%d", time.Now().UnixNano())
	raw := rawConn(b, zc.DirectAddrs())
	if _, err := raw.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	rawCreate := func(concurrent int) func(int) time.Duration {
		return func(it int) time.Duration {
			parent := fmt.Sprintf("%s/raw-%d-%d", root, concurrent, it)
			if _, err := raw.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			zookeeper.UpTo(n, concurrent, func(i int) {
				if _, err := raw.Create(fmt.Sprintf("%s/%06d", parent, i), []byte("x"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
					b.Error(err)
				}
			})
			took := time.Since(start)
			zookeeper.UpTo(n, 64, func(i int) { _ = raw.Delete(fmt.Sprintf("%s/%06d", parent, i), -1) })
			_ = raw.Delete(parent, -1)
			return took
		}
	}
	register := func(it int) time.Duration {
		r, err := zookeeper.NewRegistrar(zc.DirectAddrs(), zookeeper.WithRoot(root), zookeeper.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		svc := fmt.Sprintf("svc-%d", it)
		// The session's handshake and the service node are left out:
		// the clock starts once a first instance is registered.
		if err := r.Register(context.Background(), registry.Instance{Name: svc, ID: "first", Addr: "127.0.0.1:19999"}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		zookeeper.UpTo(n, n, func(i int) {
			in := registry.Instance{Name: svc, ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
			if err := r.Register(context.Background(), in); err != nil {
				b.Error(err)
			}
		})
		return time.Since(start)
	}
	p50 := registrytest.SideBySide(b,
		registrytest.Path{Name: "raw-sequential", Once: rawCreate(1)},
		registrytest.Path{Name: "raw-concurrent", Once: rawCreate(64)},
		registrytest.Path{Name: "registrar", Once: register},
	)
	b.ReportMetric(float64(p50["registrar"])/float64(p50["raw-concurrent"]), "registrar/raw-concurrent")
	b.ReportMetric(float64(p50["registrar"])/float64(p50["raw-sequential"]), "registrar/raw-sequential")
}
