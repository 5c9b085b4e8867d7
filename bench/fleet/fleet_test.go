package fleet_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// BenchmarkFleet runs a fleet (package doc) for each combination of
// -fleet.processes and -fleet.ttl: renewals only for -fleet.quiet, then
// under churn for -fleet.duration, and reports per run the lease renewals
// a second, etcd's CPU and memory per member, the registrar processes',
// the control plane's and the client process's, the time from each change
// to each tier (p50, p99, max), the control plane's CPU per change per
// stream and the client's heap per followed instance. Run with
// -benchtime 1x -v (-v logs one summary line per run).
func BenchmarkFleet(b *testing.B) {
	var ps []int
	for _, s := range strings.Split(*flagProcesses, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || p < 1 {
			b.Fatalf("-fleet.processes: bad count %q", s)
		}
		ps = append(ps, p)
	}
	var ttls []time.Duration
	for _, s := range strings.Split(*flagTTL, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < time.Second {
			b.Fatalf("-fleet.ttl: bad TTL %q", s)
		}
		ttls = append(ttls, d)
	}
	for _, ttl := range ttls {
		for _, p := range ps {
			b.Run(fmt.Sprintf("processes=%d/ttl=%v", p, ttl), func(b *testing.B) {
				for range b.N {
					runFleet(b, p, ttl)
				}
			})
		}
	}
}

// fleetProcs are the processes whose CPU and memory a run reads.
type fleetProcs struct {
	members []*etcdtest.Member
	hosts   []*child
	xds     *child
	clients *child
}

// sample is what a window starts and ends with.
type sample struct {
	at      time.Time
	members []metrics
	cpu     map[string]time.Duration // by process group
	mcpu    []time.Duration          // by member
}

func (f *fleetProcs) sample(b *testing.B) sample {
	s := sample{at: time.Now(), cpu: map[string]time.Duration{}}
	for _, m := range f.members {
		ms, err := scrape(m.DirectEndpoint() + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		s.members = append(s.members, ms)
		s.mcpu = append(s.mcpu, mustCPU(b, m.Pid()))
	}
	for _, h := range f.hosts {
		s.cpu["registrars"] += mustCPU(b, h.pid())
	}
	s.cpu["xds"] = mustCPU(b, f.xds.pid())
	s.cpu["clients"] = mustCPU(b, f.clients.pid())
	// This process: the ADS streams' clients and the churn driver.
	s.cpu["bench"] = mustCPU(b, os.Getpid())
	return s
}

func mustCPU(b *testing.B, pid int) time.Duration {
	d, err := procCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func mustRSS(b *testing.B, pid int) float64 {
	r, err := procRSS(pid)
	if err != nil {
		b.Fatal(err)
	}
	return float64(r)
}

// window is what happened between two samples.
type window struct {
	secs       float64
	renewals   float64            // lease renewals a second, all members
	audits     float64            // LeaseTimeToLive requests a second
	requests   float64            // gRPC requests and stream messages a second, all members
	byMethod   map[string]float64 // gRPC requests and stream messages a second, by method
	memberCPU  []float64          // share of a core, by member
	processCPU map[string]float64
	cpu        map[string]time.Duration
}

func between(a, z sample) window {
	w := window{secs: z.at.Sub(a.at).Seconds(), processCPU: map[string]float64{}, cpu: map[string]time.Duration{}, byMethod: map[string]float64{}}
	for i := range a.members {
		w.memberCPU = append(w.memberCPU, (z.mcpu[i]-a.mcpu[i]).Seconds()/w.secs)
		// Each unary request and each stream message received counts one.
		for k, v := range z.members[i] {
			name, labels, _ := strings.Cut(k, "{")
			if name != "grpc_server_msg_received_total" {
				continue
			}
			_, method, _ := strings.Cut(labels, `grpc_method="`)
			method, _, _ = strings.Cut(method, `"`)
			w.byMethod[method] += (v - a.members[i][k]) / w.secs
		}
	}
	for _, r := range w.byMethod {
		w.requests += r
	}
	w.renewals, w.audits = w.byMethod["LeaseKeepAlive"], w.byMethod["LeaseTimeToLive"]
	for k := range z.cpu {
		w.cpu[k] = z.cpu[k] - a.cpu[k]
		w.processCPU[k] = w.cpu[k].Seconds() / w.secs
	}
	return w
}

// runFleet is one run of the fleet: p registrar processes on leases of
// ttl, with every other parameter from the flags.
func runFleet(b *testing.B, p int, ttl time.Duration) {
	nInst, nServices := *flagInstances, *flagServices
	nFollowed := min(*flagFollowed, nServices)
	spread := min(max(*flagSpread, 1), nInst)
	nRegions := max(*flagRegions, 1)
	procs := &fleetProcs{}
	var regions [][]string
	var cs []*etcdtest.Cluster
	for range nRegions {
		c := etcdtest.Start(b, etcdtest.WithProcesses(), etcdtest.WithSize(*flagMembers))
		cs = append(cs, c)
		regions = append(regions, c.DirectEndpoints())
		procs.members = append(procs.members, c.Members()...)
	}

	// The registrar processes, spread over the hosts.
	start := time.Now()
	nHosts := min(*flagHosts, p)
	ready := make(chan string, nHosts+8)
	for h := range nHosts {
		first, count := h*p/nHosts, (h+1)*p/nHosts-h*p/nHosts
		procs.hosts = append(procs.hosts, startRole(b, roleConfig{
			Role: "registrars", Regions: regions, First: first, Count: count,
			Instances: nInst, Services: nServices, Spread: spread, TTL: ttl, Naming: *flagNaming > 0,
		}, func(line string) { ready <- line }))
	}
	var hostHeap float64
	for range nHosts {
		f := strings.Fields(awaitLine(b, ready, "ready ", procs.hosts...))
		before, _ := strconv.ParseFloat(f[1], 64)
		after, _ := strconv.ParseFloat(f[2], 64)
		hostHeap += after - before
	}
	registered := time.Since(start)

	followed := make([]string, nFollowed)
	expect, expectFirst := map[string]int{}, map[string]int{}
	for s := range nFollowed {
		followed[s] = serviceName(s)
	}
	for q := range p {
		for i := range nInst {
			name := fleetInstance(q, i, nInst, nServices, spread).Name
			expect[name]++
			if regionOf(q, nServices, nRegions) == 0 {
				expectFirst[name]++
			}
		}
	}

	// The control plane.
	xdsLines := make(chan string, 1)
	procs.xds = startRole(b, roleConfig{Role: "xds", Regions: regions}, func(line string) { xdsLines <- line })
	xdsAddr := strings.TrimPrefix(awaitLine(b, xdsLines, "addr ", procs.xds), "addr ")

	// The client process and the ADS streams, observed by the matcher.
	m := newMatcher()
	for j := range *flagChannels {
		m.observe(musterObserver(j), observer{tierMuster, followed[j%nFollowed], anyRegion})
	}
	for j := range *flagNaming {
		m.observe(namingObserver(j), observer{tierNaming, followed[j%nFollowed], 0})
	}
	for j := range *flagStreams {
		m.observe(adsObserver(j), observer{tierADS, followed[j%nFollowed], anyRegion})
	}
	clientLines := make(chan string, 16)
	procs.clients = startRole(b, roleConfig{
		Role: "clients", Regions: regions, Followed: followed,
		Channels: *flagChannels, NamingChannels: *flagNaming, Expect: expect, ExpectFirst: expectFirst,
	}, func(line string) {
		if strings.HasPrefix(line, "d ") {
			id, d, at, err := parseDiffLine(line)
			if err == nil {
				m.saw(id, d, at)
			}
			return
		}
		if strings.HasPrefix(line, "heap ") {
			clientLines <- line
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var streams, streamsReady sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		streams.Wait()
	})
	for j := range *flagStreams {
		s := followed[j%nFollowed]
		watchADS(b, ctx, &streams, xdsAddr, adsObserver(j), s, expect[s], m, &streamsReady)
	}
	heapBefore := awaitLine(b, clientLines, "heap before ", procs.clients)
	heapMuster := awaitLine(b, clientLines, "heap muster ", procs.clients)
	heapNaming := awaitLine(b, clientLines, "heap naming ", procs.clients)
	waitGroup(b, &streamsReady, "every ADS stream's first list")
	loaded := time.Since(start)

	// Renewals only, then under churn.
	s0 := procs.sample(b)
	time.Sleep(*flagQuiet) // the window measured: nothing to await
	s1 := procs.sample(b)
	opts, err := registrarOptions(ttl, *flagNaming > 0)
	if err != nil {
		b.Fatal(err)
	}
	storeOpts := make([]etcd.StoreOption, 0, len(opts))
	for _, o := range opts {
		storeOpts = append(storeOpts, o)
	}
	var stores []registry.Store
	for _, c := range cs {
		store, err := etcd.NewStore(c.Client(b, c.DirectEndpoints()...), storeOpts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = store.Close() })
		stores = append(stores, store)
	}
	ch := newChurn(stores, m, followed)
	cctx, stop := context.WithTimeout(ctx, *flagDuration)
	ch.run(cctx, *flagChurn)
	stop()
	s2 := procs.sample(b)
	deadline := time.Now().Add(10 * time.Second)
	for len(m.outstanding()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the matcher until the last change arrives
	}

	q, w := between(s0, s1), between(s1, s2)
	// Renewals come in bursts (a registrar renews every TTL/3, and the
	// registrars started close together): counted over both windows.
	all := between(s0, s2)
	rep := report{b: b}
	rep.add("renewals/s", all.renewals)
	rep.add("renewals-due/s", float64(p)*3/ttl.Seconds()) // a renewal every TTL/3
	var watchers, renewed, expired float64
	for i, ms := range s2.members {
		watchers += ms["etcd_debugging_mvcc_watcher_total"]
		// Renewals as the leader applies them; expiries since the start.
		renewed += ms["etcd_debugging_lease_renewed_total"] - s0.members[i]["etcd_debugging_lease_renewed_total"]
		expired += ms["etcd_debugging_server_lease_expired_total"]
	}
	rep.add("renewals-leader/s", renewed/all.secs)
	rep.add("leases-expired", expired)
	rep.add("etcd-watchers", watchers)
	rep.add("audits/s", all.audits)
	rep.add("etcd-requests/s", all.requests)
	var quietCPU float64
	for _, c := range q.memberCPU {
		quietCPU += c
	}
	if q.requests > 0 {
		rep.add("etcd-cpu-µs/message-quiet", 1e6*quietCPU/q.requests) // with the members' idle cost
	}
	for i := range procs.members {
		rep.add(fmt.Sprintf("etcd%d-cpu%%-quiet", i), 100*q.memberCPU[i])
		rep.add(fmt.Sprintf("etcd%d-cpu%%-churn", i), 100*w.memberCPU[i])
		rep.add(fmt.Sprintf("etcd%d-rss-MB", i), mustRSS(b, procs.members[i].Pid())/1e6)
	}
	var hostRSS float64
	for _, h := range procs.hosts {
		hostRSS += mustRSS(b, h.pid())
	}
	rep.add("registrars-cpu%", 100*w.processCPU["registrars"])
	rep.add("registrars-rss-MB", hostRSS/1e6)
	rep.add("registrar-heap-KB/process", hostHeap/float64(p)/1e3)
	rep.add("registrar-cpu-µs/process/s", 1e6*w.processCPU["registrars"]/float64(p))
	changes := float64(ch.made.Load())
	rep.add("changes/s", changes/w.secs)
	rep.add("changes-late", float64(ch.late.Load()))
	rep.add("changes-failed", float64(ch.failures.Load()))
	rep.add("xds-cpu%-quiet", 100*q.processCPU["xds"])
	rep.add("xds-cpu%-churn", 100*w.processCPU["xds"])
	if changes > 0 && *flagStreams > 0 {
		net := w.cpu["xds"].Seconds() - q.processCPU["xds"]*w.secs
		rep.add("xds-cpu-µs/change/stream", 1e6*net/changes/float64(*flagStreams))
	}
	rep.add("xds-rss-MB", mustRSS(b, procs.xds.pid())/1e6)
	rep.add("clients-cpu%-churn", 100*w.processCPU["clients"])
	rep.add("clients-rss-MB", mustRSS(b, procs.clients.pid())/1e6)
	rep.add("ads-clients-cpu%-churn", 100*w.processCPU["bench"])
	heap := func(line string) (bytes, instances float64) {
		f := strings.Fields(line)
		bytes, _ = strconv.ParseFloat(f[2], 64)
		if len(f) > 3 {
			instances, _ = strconv.ParseFloat(f[3], 64)
		}
		return bytes, instances
	}
	h0, _ := heap(heapBefore)
	h1, n1 := heap(heapMuster)
	h2, n2 := heap(heapNaming)
	if n1 > 0 {
		rep.add("muster-client-B/channel-instance", (h1-h0)/n1)
	}
	if n2 > 0 {
		rep.add("naming-client-B/channel-instance", (h2-h1)/n2)
	}
	out := m.outstanding()
	for _, tier := range []string{tierMuster, tierNaming, tierADS} {
		lat := m.latencies(tier)
		if len(lat) == 0 && out[tier] == 0 {
			continue
		}
		rep.add(tier+"-seen", float64(len(lat)))
		rep.add(tier+"-p50-ms", ms(quantile(lat, 0.5)))
		rep.add(tier+"-p99-ms", ms(quantile(lat, 0.99)))
		rep.add(tier+"-max-ms", ms(quantile(lat, 1)))
		rep.add(tier+"-unseen", float64(out[tier]))
		for k := range kinds {
			if l := m.latencies(tier, k); len(l) > 0 {
				b.Logf("%s %s: n %d p50 %.1f ms p99 %.1f ms max %.1f ms", tier, kindNames[k], len(l), ms(quantile(l, 0.5)), ms(quantile(l, 0.99)), ms(quantile(l, 1)))
			}
		}
	}
	rep.add("setup-registered-s", registered.Seconds())
	rep.add("setup-loaded-s", loaded.Seconds())
	b.ReportMetric(0, "ns/op")
	b.Logf("etcd messages a second by method, quiet: %s; under churn: %s", rates(q.byMethod), rates(w.byMethod))
	b.Logf("processes %d × %d instances (in %d services each) over %d services, TTL %v, %d region(s) of %d member(s); %d channels, %d etcd-naming channels, %d ADS streams on %d services; churn %.0f/s for %v:\n%s",
		p, nInst, spread, nServices, ttl, nRegions, *flagMembers, *flagChannels, *flagNaming, *flagStreams, nFollowed, *flagChurn, *flagDuration, rep.String())
}

// report collects a run's figures: each is a benchmark metric and a line
// of the run's summary.
type report struct {
	b     *testing.B
	lines []string
}

func (r *report) add(unit string, v float64) {
	r.b.ReportMetric(v, unit)
	r.lines = append(r.lines, fmt.Sprintf("  %-30s %12.2f", unit, v))
}

func (r *report) String() string { return strings.Join(r.lines, "\n") }

// rates formats messages a second by method, the busiest first.
func rates(byMethod map[string]float64) string {
	var ks []string
	for k, v := range byMethod {
		if v >= 0.05 {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b string) int { return cmp.Compare(byMethod[b], byMethod[a]) })
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s %.1f", k, byMethod[k])
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// awaitLine waits for a line starting with prefix on lines, failing b if
// one of the children ends first or it does not come within -fleet.setup.
func awaitLine(b *testing.B, lines <-chan string, prefix string, children ...*child) string {
	timeout := time.After(*flagSetup)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case l := <-lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-tick.C:
			for _, c := range children {
				if why := c.failed(); why != "" {
					b.Fatal(why)
				}
			}
		case <-timeout:
			b.Fatalf("no %q line within %v", prefix, *flagSetup)
		}
	}
}

// waitGroup waits for wg, failing b after -fleet.setup.
func waitGroup(b *testing.B, wg *sync.WaitGroup, what string) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(*flagSetup):
		b.Fatalf("%s not within %v", what, *flagSetup)
	}
}
