// Command balancer benchmarks Muster's balancers against grpc-go's, side by
// side in one process:
//
//   - pick cost: ns and allocations per Pick+Done of the picker each policy
//     publishes over real loopback connections, on one goroutine and on
//     all (RunParallel), for muster_p2c, muster_wrr, round_robin and
//     least_request_experimental;
//   - tail latency: a fixed number of unary calls at a fixed concurrency
//     through a new channel to loopback backends, one of which adds a
//     fixed delay to every call, for the same policies, plus muster_p2c and
//     round_robin with every backend healthy;
//   - failing backend: calls at a fixed concurrency for a fixed time while
//     one backend fails every call with Unavailable; the share of failed
//     calls among those started after the first second, per policy.
//
// Each channel first makes calls until every backend has served one (so
// every connection is up, and each policy has seen the slow backend once).
//
//	go run ./bench/balancer -calls 20000 -concurrency 8 -rounds 3
//
// Its test file runs the pick cost, the tail latency, routed picks and a
// rolling deploy as Go benchmarks (go test -run '^$' -bench . ./bench/balancer/);
// docs/BENCHMARKS.md has the figures.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	var (
		backends    = flag.Int("backends", 5, "loopback backends")
		delay       = flag.Duration("delay", 20*time.Millisecond, "delay added to every call of the slow backend")
		calls       = flag.Int("calls", 20000, "unary calls per tail-latency run")
		concurrency = flag.Int("concurrency", 8, "concurrent callers in tail-latency runs")
		rounds      = flag.Int("rounds", 3, "rounds of tail-latency runs (every policy once per round)")
		skipPick    = flag.Bool("skip-pick", false, "skip the pick-cost benchmarks")
		skipTail    = flag.Bool("skip-tail", false, "skip the tail-latency runs")
		failFor     = flag.Duration("failing", 4*time.Second, "length of each failing-backend run (0 skips them)")
		extra       = flag.String("extra", "", "';'-separated list of further tail-latency contenders as policy:json, e.g. 'muster_p2c:{\"decayTime\":\"1s\"}'")
	)
	flag.Parse()
	cfg := config{backends: *backends, delay: *delay, calls: *calls, concurrency: *concurrency, rounds: *rounds,
		pick: !*skipPick, tails: !*skipTail, failFor: *failFor}
	if *extra != "" {
		cfg.extras = strings.Split(*extra, ";")
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "balancer bench:", err)
		os.Exit(1)
	}
}

// config is what one run measures, from the command's flags.
type config struct {
	backends    int           // loopback backends
	delay       time.Duration // added to every call of the slow backend
	calls       int           // unary calls per tail-latency run
	concurrency int           // concurrent callers
	rounds      int           // rounds of tail-latency and failing-backend runs
	pick        bool          // measure the pick cost
	tails       bool          // run the tail-latency contenders
	failFor     time.Duration // length of each failing-backend run; 0 skips them
	extras      []string      // further tail-latency contenders, policy:json
}

// run starts cfg.backends backends and prints each table cfg asks for.
func run(cfg config) error {
	c, err := startCluster(cfg.backends)
	if err != nil {
		return err
	}
	defer c.stop()
	fmt.Printf("%s %s/%s, GOMAXPROCS %d, %d loopback backends\n\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), cfg.backends)
	if cfg.pick {
		if err := pickTable(c); err != nil {
			return err
		}
	}
	if cfg.tails {
		if err := tailTable(c, cfg); err != nil {
			return err
		}
	}
	if cfg.failFor > 0 {
		return failingTable(c, cfg)
	}
	return nil
}

// pickTable prints the Pick+Done cost of each policy's published picker.
func pickTable(c *cluster) error {
	fmt.Println("Pick+Done cost (testing.Benchmark on the published picker):")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "policy\tns/op\tallocs/op\tparallel ns/op\tparallel allocs/op\t")
	for _, p := range policies {
		one, err := pickCost(c, p, false)
		if err != nil {
			return err
		}
		par, err := pickCost(c, p, true)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\t%.1f\t%d\t%.1f\t%d\t\n", p,
			float64(one.T.Nanoseconds())/float64(one.N), one.AllocsPerOp(),
			float64(par.T.Nanoseconds())/float64(par.N), par.AllocsPerOp())
	}
	w.Flush()
	fmt.Println()
	return nil
}

// tailTable prints the tail latency of every contender, slow backend and
// healthy, cfg.rounds times.
func tailTable(c *cluster, cfg config) error {
	fmt.Printf("Tail latency: %d calls at concurrency %d; one of %d backends +%v unless \"healthy\":\n", cfg.calls, cfg.concurrency, cfg.backends, cfg.delay)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "round\tpolicy\tp50\tp99\tp999\tslow share\twall\tfailed\t")
	type contender struct {
		policy string
		slow   bool
	}
	var cs []contender
	for _, p := range policies {
		cs = append(cs, contender{p, true})
	}
	for _, e := range cfg.extras {
		cs = append(cs, contender{e, true})
	}
	cs = append(cs, contender{policies[0], false}, contender{"round_robin", false})
	for _, e := range cfg.extras {
		cs = append(cs, contender{e, false})
	}
	for r := 1; r <= cfg.rounds; r++ {
		for _, ct := range cs {
			label := ct.policy
			if ct.slow {
				c.slow(cfg.delay)
			} else {
				c.slow(0)
				label += " (healthy)"
			}
			t, err := tailLatency(c, ct.policy, cfg.calls, cfg.concurrency)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%d\t%s\t%v\t%v\t%v\t%.2f%%\t%v\t%d\t\n", r, label,
				us(t.p50), us(t.p99), us(t.p999), 100*t.slowShare, t.wall.Round(time.Millisecond), t.failed)
			fmt.Fprintf(os.Stderr, "round %d: %s done\n", r, label)
		}
	}
	w.Flush()
	fmt.Println()
	return nil
}

// failingTable prints the share of failed calls per policy while one
// backend fails every call, cfg.rounds times.
func failingTable(c *cluster, cfg config) error {
	fmt.Printf("Failing backend: calls for %v at concurrency %d; one of %d backends fails every call:\n", cfg.failFor, cfg.concurrency, cfg.backends)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "round\tpolicy\tcalls\tfailed\tafter 1s: calls\tfailed\tshare\t")
	for r := 1; r <= cfg.rounds; r++ {
		for _, p := range policies {
			f, err := failingShare(c, p, cfg.failFor, cfg.concurrency)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%d\t%d\t%.3f%%\t\n", r, p, f.calls, f.failed,
				f.lateCalls, f.lateFailed, 100*float64(f.lateFailed)/float64(max(f.lateCalls, 1)))
			fmt.Fprintf(os.Stderr, "round %d: %s (failing) done\n", r, p)
		}
	}
	w.Flush()
	return nil
}

// us rounds to microseconds.
func us(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
