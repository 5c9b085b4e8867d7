package console_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/admission"
	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// putInstances writes n instances of service straight into etcd (without
// a lease), 100 to a transaction, and returns their IDs.
func putInstances(tb testing.TB, cli *clientv3.Client, service string, n int) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := make([]string, 0, n)
	var ops []clientv3.Op
	flush := func() {
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			tb.Fatalf("put instances: %v", err)
		}
		ops = ops[:0]
	}
	for i := range n {
		in := registry.Instance{
			Name: service, Addr: fmt.Sprintf("10.%d.%d.%d:9000", i/65536, i/256%256, i%256),
			Zone: "zone-" + strconv.Itoa(i%3), Version: "v1." + strconv.Itoa(i%4),
			Metadata: map[string]string{"track": "stable", "shard": strconv.Itoa(i % 16)},
		}
		val, err := registry.Marshal(in)
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, in.Addr)
		ops = append(ops, clientv3.OpPut(registry.Key(registry.DefaultPrefix, service, in.Addr), string(val)))
		if len(ops) == 100 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
	return ids
}

// putOverride writes the override of one instance and returns the revision.
func putOverride(tb testing.TB, cli *clientv3.Client, service, id string, weight int) int64 {
	tb.Helper()
	val, err := registry.MarshalOverride(registry.Override{Weight: &weight})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := cli.Put(ctx, registry.OverrideKey(registry.DefaultPrefix, service, id), string(val))
	if err != nil {
		tb.Fatalf("put override: %v", err)
	}
	return resp.Header.Revision
}

// BenchmarkConsoleService10k measures, in Chromium, the time from opening
// the page of a service with 10,000 instances to its table being rendered
// (render-ms; the table shows 500 rows a page), and from an override
// written in etcd to its row showing it (change-ms).
func BenchmarkConsoleService10k(b *testing.B) {
	const n = 10000
	f := newFixtureOn(b, etcdtest.Start(b, etcdtest.WithProcesses()))
	ids := putInstances(b, f.cli, "big", n)
	// The first page of the table shows the first IDs.
	slices.Sort(ids)
	br := browsertest.Start(b)
	var render, change time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		br.Do(2*time.Minute, "render 10,000 rows",
			chromedp.Navigate(f.url+"?name=big"),
			browsertest.WaitJS(fmt.Sprintf(`document.querySelector('#matching').dataset.count === '%d'`, n)))
		render += time.Since(t0)
		id := ids[i%100]
		i++
		t1 := time.Now()
		putOverride(b, f.cli, "big", id, 0)
		br.Do(time.Minute, "show one change", browsertest.WaitJS(rowJS(id)+`.dataset.draining === 'yes'`))
		change += time.Since(t1)
	}
	b.ReportMetric(float64(render.Milliseconds())/float64(i), "render-ms")
	b.ReportMetric(float64(change.Milliseconds())/float64(i), "change-ms")
}

// sseClient reads one service's event stream and reports the revision of
// each state event with the time it arrived.
func sseClient(ctx context.Context, url string, src netip.Addr, got chan<- time.Time, want *revisionGate) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "id: ")
		if !ok {
			continue
		}
		rev, _ := strconv.ParseInt(id, 10, 64)
		if want.reached(rev) {
			got <- time.Now()
		}
	}
	return sc.Err()
}

// revisionGate holds the revision the clients wait for.
type revisionGate struct {
	mu  sync.Mutex
	rev int64
}

func (g *revisionGate) set(rev int64) {
	g.mu.Lock()
	g.rev = rev
	g.mu.Unlock()
}

func (g *revisionGate) reached(rev int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rev > 0 && rev >= g.rev
}

// BenchmarkConsoleFanout100 measures the time from a change written in
// etcd until each of 100 event-stream clients of one console has it (p50,
// p99), and the test process's CPU per change (the console and the 100
// clients; etcd runs in a child process). Each client comes from an
// address of its own, as browsers of 100 operators would (one address may
// hold 32 streams). The console is served twice, on one registry, in the
// same run: by a plain HTTP server (http=plain) and by the server every
// HTTP listener of the command has (http=admission: connection shares,
// deadlines), so that the cost of admission shows as their ratio.
func BenchmarkConsoleFanout100(b *testing.B) {
	f := newFixtureOn(b, etcdtest.Start(b, etcdtest.WithProcesses()))
	ids := putInstances(b, f.cli, "payments", 20)
	srv, err := console.New(etcdStore(b, f.cli, etcd.WithLogger(slog.New(slog.DiscardHandler))), console.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", srv)
	hs := admission.NewHTTP(lis, mux, nil, 0)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve()
	}()
	b.Cleanup(func() {
		_ = srv.Close()
		_ = hs.Close()
		<-served
	})
	var writes int // every change a new (instance, weight) pair: an unchanged one sends no event
	for _, tc := range []struct{ name, url string }{
		{"http=plain", f.url},
		{"http=admission", "http://" + lis.Addr().String() + "/ui/"},
	} {
		b.Run(tc.name, func(b *testing.B) { benchFanout(b, f, tc.url, ids, &writes) })
	}
}

// benchFanout follows payments with 100 event-stream clients of the
// console at url and measures each change of the instances ids, counting
// the changes in writes.
func benchFanout(b *testing.B, f *fixture, url string, ids []string, writes *int) {
	const clients = 100
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan time.Time, clients*4)
	gate := &revisionGate{}
	var wg sync.WaitGroup
	for i := range clients {
		src := netip.AddrFrom4([4]byte{127, 0, 3, byte(i + 1)})
		wg.Go(func() { _ = sseClient(ctx, url+"api/service/events?name=payments", src, got, gate) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	change := func() int64 {
		*writes++
		return putOverride(b, f.cli, "payments", ids[*writes%len(ids)], *writes/len(ids)%100+1)
	}
	// Let every client receive its first state before measuring.
	gate.set(change())
	for range clients {
		<-got
	}
	var lat []time.Duration
	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		gate.set(change())
		for range clients {
			lat = append(lat, (<-got).Sub(t0))
		}
	}
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(i)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000, "cpu-ms/change")
}
