package etcd_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// benchInstances is the number of instances of the registration benchmarks.
const benchInstances = 10_000

// rawWriters is the number of goroutines of the raw contender: Puts of
// instance values on one shared lease, as many in flight as etcd's client
// takes.
const rawWriters = 64

// BenchmarkRegistrationThroughput measures how fast 10,000 instances get
// written under one lease, in the same run: raw Puts of their values by 64
// goroutines sharing one lease (the floor), one Registrar given the 10,000
// Registers at once (each caller waiting for its write), and one Registrar
// fed by 64 callers registering one instance after another. Each iteration
// runs every contender once, on a fresh prefix, in a rotating order.
// Reported: instances/s per contender and the ratios to the floor.
func BenchmarkRegistrationThroughput(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	contenders := []struct {
		name string
		run  func(prefix string) error
	}{
		{"raw", func(prefix string) error { return rawSharedLeasePuts(cli, prefix) }},
		{"registrar", func(prefix string) error { return registerAll(cli, prefix, benchInstances) }},
		{"registrar-64-callers", func(prefix string) error { return registerAll(cli, prefix, rawWriters) }},
	}
	spent := make([]time.Duration, len(contenders))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range contenders {
			k := (i + j) % len(contenders)
			prefix := fmt.Sprintf("/bench-reg-%d-%s", time.Now().UnixNano(), contenders[k].name)
			start := time.Now()
			if err := contenders[k].run(prefix); err != nil {
				b.Fatalf("%s: %v", contenders[k].name, err)
			}
			spent[k] += time.Since(start)
		}
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(benchInstances*b.N) / d.Seconds() }
	for k, ct := range contenders {
		b.ReportMetric(rate(spent[k]), ct.name+"-inst/s")
		if k > 0 {
			b.ReportMetric(rate(spent[k])/rate(spent[0]), ct.name+"/raw")
		}
	}
}

// benchValue returns instance i's key and value under prefix.
func benchValue(prefix string, i int) (string, string, error) {
	in := instance("svc", fmt.Sprintf("i%05d", i), 20000+i%40000).Normalize()
	in.RegisteredAt = time.Now()
	val, err := registry.Marshal(in)
	return registry.Key(prefix, in.Name, in.ID), string(val), err
}

// rawSharedLeasePuts grants a lease and puts benchInstances instance values
// under prefix with it, from rawWriters goroutines; the lease is revoked
// (and the keys deleted) before it returns.
func rawSharedLeasePuts(cli *clientv3.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		return err
	}
	defer func() { _, _ = cli.Revoke(context.Background(), lease.ID) }()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for w := 0; w < rawWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				key, val, err := benchValue(prefix, i)
				if err == nil {
					_, err = cli.Put(ctx, key, val, clientv3.WithLease(lease.ID))
				}
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < benchInstances; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// registerAll registers benchInstances instances under prefix with a new
// Registrar from callers goroutines, each Register waiting for its write;
// the registrar is closed (its keys deleted) before it returns.
func registerAll(cli *clientv3.Client, prefix string, callers int) error {
	r, err := etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet),
		etcd.WithRequestTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, callers)
	for w := 0; w < callers; w++ {
		go func() {
			for i := w; i < benchInstances; i += callers {
				if err := r.Register(ctx, instance("svc", fmt.Sprintf("i%05d", i), 20000+i%40000)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < callers; w++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkLeaseLossRecovery measures how long a Registrar holding 10,000
// instances takes to write them all again under a new lease after its
// lease is revoked from outside (another client): from the Revoke's answer
// to the last of the 10,000 keys seen by a watch bound to a new lease.
// Reported: ms per recovery.
func BenchmarkLeaseLossRecovery(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	admin := c.Client(b, c.DirectEndpoints()...)
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		prefix := fmt.Sprintf("/bench-loss-%d", time.Now().UnixNano())
		r, err := etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet),
			etcd.WithRequestTimeout(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		d, err := reRegistration(r, admin, prefix)
		_ = r.Close()
		if err != nil {
			b.Fatal(err)
		}
		total += d
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-reput")
}

// reRegistration registers benchInstances instances with r, revokes its
// lease through admin and returns the time from the revocation until a
// watch has seen every key written again under another lease.
func reRegistration(r *etcd.Registrar, admin *clientv3.Client, prefix string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < benchInstances; i++ {
		// An ended ctx queues the instance without waiting for it.
		done, stop := context.WithCancel(ctx)
		stop()
		_ = r.Register(done, instance("svc", fmt.Sprintf("i%05d", i), 20000+i%40000))
	}
	if err := r.WaitRegistered(ctx); err != nil {
		return 0, err
	}
	old := clientv3.LeaseID(r.Status().Session)
	resp, err := admin.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	wch := admin.Watch(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	if _, err := admin.Revoke(ctx, old); err != nil {
		return 0, err
	}
	revoked := time.Now()
	back := make(map[string]struct{}, benchInstances)
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return 0, err
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut && ev.Kv.Lease != 0 && clientv3.LeaseID(ev.Kv.Lease) != old {
				back[string(ev.Kv.Key)] = struct{}{}
			}
		}
		if len(back) == benchInstances {
			return time.Since(revoked), nil
		}
	}
	return 0, fmt.Errorf("watch ended with %d of %d keys back: %w", len(back), benchInstances, ctx.Err())
}
