package resolver_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// fanOutChannels is the number of channels of BenchmarkFanOut, per
// contender.
const fanOutChannels = 1000

// BenchmarkFanOut measures one change reaching many channels of one
// process, for two contenders in the same run, taking turns within each
// iteration (in alternating order):
//   - muster: 1,000 channels on "muster:///fan" through one Builder and one
//     Discovery; the change is a Registrar.Register, timed until every
//     channel's balancer has the new list;
//   - floor: 1,000 channels each on its own grpc-go manual resolver, fed
//     the same list (the same endpoints, with their instances as
//     attributes) by UpdateState on each resolver in turn from one
//     goroutine: gRPC's own cost of delivering a state to 1,000 channels,
//     with no registry, watch or resolver goroutine.
//
// Both end in the same balancer, which notes when its
// UpdateClientConnState gets each list. Reported per contender: p50 and
// p99 over every delivery ("each") and over each change's last delivery
// ("all"), the p50 and p99 of each change's first delivery ("first": for
// muster, mostly the way through etcd, which the floor does not take), the
// p50 and p99 of the time from each change's first delivery to its last
// ("fan": the fan-out alone, without the way to the first channel), the
// process CPU per change, and the ratios muster/floor; and the etcd
// watches the server holds (Muster's channels and the registrar).
func BenchmarkFanOut(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	base := etcdtest.WatcherCount(b)
	reg, err := etcd.NewRegistrar(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	disc, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer disc.Close()
	bld := resolver.NewBuilder(disc, resolver.WithLogger(quiet))
	muster := newFanOutSide()
	floor := newFanOutSide()
	manuals := make([]*manual.Resolver, fanOutChannels)
	for i := range fanOutChannels {
		muster.seen[i] = openChannel(b, bld, "muster:///fan")
		manuals[i] = manual.NewBuilderWithScheme("floor")
		manuals[i].InitialState(grpcresolver.State{})
		floor.seen[i] = openChannel(b, manuals[i], "floor:///fan")
	}
	for i := range fanOutChannels {
		muster.seen[i].Wait(b, 0)
		floor.seen[i].Wait(b, 0)
	}
	var eps []grpcresolver.Endpoint
	for i := 0; i < b.N; i++ {
		in := registry.Instance{Name: "fan", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		eps = append(eps, resolver.EndpointOf(in))
		state := grpcresolver.State{Endpoints: slices.Clone(eps)}
		state.Addresses = make([]grpcresolver.Address, len(eps))
		for j, ep := range eps {
			state.Addresses[j] = ep.Addresses[0]
		}
		runMuster := func() {
			muster.measure(b, i+1, func() {
				if err := reg.Register(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			})
		}
		runFloor := func() {
			floor.measure(b, i+1, func() {
				for _, r := range manuals {
					r.UpdateState(state)
				}
			})
		}
		if i%2 == 0 {
			runMuster()
			runFloor()
		} else {
			runFloor()
			runMuster()
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	m, f := muster.report(b, "muster"), floor.report(b, "floor")
	for k, v := range m {
		b.ReportMetric(v/f[k], k+"-muster/floor")
	}
	b.ReportMetric(etcdtest.WatcherCount(b)-base, "etcd-watches")
}

// fanOutSide is one contender of BenchmarkFanOut: its channels' arrivals
// and what was measured.
type fanOutSide struct {
	seen  []*registrytest.Arrivals
	each  []time.Duration // every delivery
	all   []time.Duration // the last delivery of each change
	first []time.Duration // the first delivery of each change
	fan   []time.Duration // from the first delivery of each change to its last
	cpu   time.Duration   // process CPU over every change
}

func newFanOutSide() *fanOutSide {
	return &fanOutSide{seen: make([]*registrytest.Arrivals, fanOutChannels)}
}

// measure makes a change and waits until every channel has a list of n
// endpoints.
func (s *fanOutSide) measure(b *testing.B, n int, change func()) {
	cpu0 := processCPU(b)
	start := time.Now()
	change()
	var first, last time.Duration
	for i, a := range s.seen {
		d := a.Wait(b, n).Sub(start)
		s.each = append(s.each, d)
		last = max(last, d)
		if i == 0 || d < first {
			first = d
		}
	}
	s.all = append(s.all, last)
	s.first = append(s.first, first)
	s.fan = append(s.fan, last-first)
	s.cpu += processCPU(b) - cpu0
}

// report reports the side's figures under its name and returns them by
// metric.
func (s *fanOutSide) report(b *testing.B, name string) map[string]float64 {
	m := map[string]float64{
		"each-p50":  registrytest.Micros(registrytest.Percentile(s.each, 0.50)),
		"each-p99":  registrytest.Micros(registrytest.Percentile(s.each, 0.99)),
		"all-p50":   registrytest.Micros(registrytest.Percentile(s.all, 0.50)),
		"all-p99":   registrytest.Micros(registrytest.Percentile(s.all, 0.99)),
		"first-p50": registrytest.Micros(registrytest.Percentile(s.first, 0.50)),
		"first-p99": registrytest.Micros(registrytest.Percentile(s.first, 0.99)),
		"fan-p50":   registrytest.Micros(registrytest.Percentile(s.fan, 0.50)),
		"fan-p99":   registrytest.Micros(registrytest.Percentile(s.fan, 0.99)),
		"cpu":       registrytest.Micros(s.cpu / time.Duration(len(s.all))),
	}
	for k, v := range m {
		b.ReportMetric(v, name+"-"+k+"-µs")
	}
	return m
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
