package etcd_test

import (
	"context"
	"fmt"
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
	in := benchInstance(i).Normalize()
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
	return rawPuts(ctx, cli, prefix, lease.ID)
}

// rawPuts puts benchInstances instance values under prefix with lease,
// from rawWriters goroutines.
func rawPuts(ctx context.Context, cli *clientv3.Client, prefix string, lease clientv3.LeaseID) error {
	return byCallers(rawWriters, func(i int) error {
		key, val, err := benchValue(prefix, i)
		if err == nil {
			_, err = cli.Put(ctx, key, val, clientv3.WithLease(lease))
		}
		return err
	})
}

// byCallers calls do for each of the benchInstances instances from callers
// goroutines, each calling it for one instance after another, and returns
// the first error (a goroutine stops at its first).
func byCallers(callers int, do func(i int) error) error {
	errs := make(chan error, callers)
	for w := 0; w < callers; w++ {
		go func() {
			for i := w; i < benchInstances; i += callers {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for w := 0; w < callers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
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
	return byCallers(callers, func(i int) error {
		return r.Register(ctx, benchInstance(i))
	})
}

// benchInstance returns instance i of the registration benchmarks.
func benchInstance(i int) registry.Instance {
	return instance("svc", fmt.Sprintf("i%05d", i), 20000+i%40000)
}

// queueAll registers benchInstances instances with r without waiting for
// each, then waits until every one is written.
func queueAll(ctx context.Context, r *etcd.Registrar) error {
	for i := 0; i < benchInstances; i++ {
		// An ended ctx queues the instance without waiting for it.
		done, stop := context.WithCancel(ctx)
		stop()
		_ = r.Register(done, benchInstance(i))
	}
	return r.WaitRegistered(ctx)
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
	if err := queueAll(ctx, r); err != nil {
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

// BenchmarkMassDeregistration measures how long 10,000 instances take to be
// deregistered at once, in the same run: raw Deletes of their keys by 64
// goroutines (the floor; the keys put with one lease beforehand), and a
// Registrar holding the 10,000 given the 10,000 Deregisters at once (10,000
// goroutines, each waiting for its key to go) or by 64 callers one after
// another. Each iteration runs every contender once, on a fresh prefix, in
// a rotating order; only the deregistration is timed. Reported: ms per
// contender and the ratios to the floor.
func BenchmarkMassDeregistration(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	contenders := []struct {
		name string
		run  func(prefix string) (time.Duration, error)
	}{
		{"raw", func(prefix string) (time.Duration, error) { return rawDeletes(cli, prefix) }},
		{"registrar", func(prefix string) (time.Duration, error) { return deregisterAll(cli, prefix, benchInstances) }},
		{"registrar-64-callers", func(prefix string) (time.Duration, error) { return deregisterAll(cli, prefix, rawWriters) }},
	}
	spent := make([]time.Duration, len(contenders))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range contenders {
			k := (i + j) % len(contenders)
			prefix := fmt.Sprintf("/bench-dereg-%d-%s", time.Now().UnixNano(), contenders[k].name)
			d, err := contenders[k].run(prefix)
			if err != nil {
				b.Fatalf("%s: %v", contenders[k].name, err)
			}
			spent[k] += d
		}
	}
	b.StopTimer()
	ms := func(k int) float64 { return float64(spent[k].Microseconds()) / 1000 / float64(b.N) }
	for k, ct := range contenders {
		b.ReportMetric(ms(k), ct.name+"-ms")
		if k > 0 {
			b.ReportMetric(ms(k)/ms(0), ct.name+"/raw")
		}
	}
}

// rawDeletes puts benchInstances instance values under prefix with a new
// lease, then deletes their keys from rawWriters goroutines and returns how
// long the deletes took; the lease is revoked before it returns.
func rawDeletes(cli *clientv3.Client, prefix string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		return 0, err
	}
	defer func() { _, _ = cli.Revoke(context.Background(), lease.ID) }()
	if err := rawPuts(ctx, cli, prefix, lease.ID); err != nil {
		return 0, err
	}
	start := time.Now()
	err = byCallers(rawWriters, func(i int) error {
		in := benchInstance(i)
		_, err := cli.Delete(ctx, registry.Key(prefix, in.Name, in.ID))
		return err
	})
	return time.Since(start), err
}

// deregisterAll registers benchInstances instances under prefix with a new
// Registrar, then deregisters them all from callers goroutines, each
// Deregister waiting for its key to go, and returns how long the
// deregistration took; the registrar is closed before it returns.
func deregisterAll(cli *clientv3.Client, prefix string, callers int) (time.Duration, error) {
	r, err := etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet),
		etcd.WithRequestTimeout(time.Minute))
	if err != nil {
		return 0, err
	}
	defer func() { _ = r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := queueAll(ctx, r); err != nil {
		return 0, err
	}
	start := time.Now()
	err = byCallers(callers, func(i int) error {
		in := benchInstance(i)
		return r.Deregister(ctx, in.Name, in.ID)
	})
	return time.Since(start), err
}
