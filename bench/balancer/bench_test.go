package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/balancer/roundrobin"

	"github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/balancer/wrr"
	"github.com/musterhq/muster/color"
)

// BenchmarkPick measures Pick+Done on the picker each policy publishes
// over five real loopback connections:
//
//	go test -run '^$' -bench Pick -count 3 ./bench/balancer/
func BenchmarkPick(b *testing.B) {
	c, err := startCluster(5)
	if err != nil {
		b.Fatal(err)
	}
	defer c.stop()
	for _, p := range policies {
		one, closeConn, err := pickBench(c, p, context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p+"/single", func(b *testing.B) { benchPick(b, one, false) })
		b.Run(p+"/parallel", func(b *testing.B) { benchPick(b, one, true) })
		closeConn()
	}
}

// BenchmarkRoutedPick measures the cost of routing by color: Pick+Done of
// Muster's policies over five real loopback connections, plain (no
// instance has a color) and routed (two of the five are blue) for an
// uncolored and a blue call, and split by locality (three in the client's
// zone, two in another), beside round_robin, in one run:
//
//	go test -run '^$' -bench RoutedPick -count 3 ./bench/balancer/
func BenchmarkRoutedPick(b *testing.B) {
	plain, err := startCluster(5)
	if err != nil {
		b.Fatal(err)
	}
	defer plain.stop()
	colored, err := startCluster(5)
	if err != nil {
		b.Fatal(err)
	}
	defer colored.stop()
	colored.blue = 2
	local, err := startCluster(5)
	if err != nil {
		b.Fatal(err)
	}
	defer local.stop()
	local.local = true
	bg := context.Background()
	for _, run := range []struct {
		name   string
		c      *cluster
		policy string
		ctx    context.Context
	}{
		{"round_robin", plain, roundrobin.Name, bg},
		{"muster_p2c/plain", plain, p2c.Name, bg},
		{"muster_p2c/routed_uncolored", colored, p2c.Name, bg},
		{"muster_p2c/routed_blue", colored, p2c.Name, color.WithColor(bg, "blue")},
		{"muster_p2c/locality", local, p2c.Name, bg},
		{"muster_wrr/plain", plain, wrr.Name, bg},
		{"muster_wrr/routed_uncolored", colored, wrr.Name, bg},
		{"muster_wrr/routed_blue", colored, wrr.Name, color.WithColor(bg, "blue")},
		{"muster_wrr/locality", local, wrr.Name, bg},
	} {
		one, closeConn, err := pickBench(run.c, run.policy, run.ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(run.name, func(b *testing.B) { benchPick(b, one, false) })
		closeConn()
	}
}

// BenchmarkTail makes 20,000 unary calls at concurrency 8 per policy to
// five loopback backends, one of them 20ms slower, and reports latency
// percentiles:
//
//	go test -run '^$' -bench Tail -benchtime 1x ./bench/balancer/
func BenchmarkTail(b *testing.B) {
	c, err := startCluster(5)
	if err != nil {
		b.Fatal(err)
	}
	defer c.stop()
	type contender struct {
		name, policy string
		delay        time.Duration
	}
	var cs []contender
	for _, p := range policies {
		cs = append(cs, contender{p + "/slow", p, 20 * time.Millisecond})
	}
	cs = append(cs, contender{policies[0] + "/healthy", policies[0], 0})
	for _, ct := range cs {
		b.Run(ct.name, func(b *testing.B) {
			c.slow(ct.delay)
			for b.Loop() {
				t, err := tailLatency(c, ct.policy, 20000, 8)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(t.p50.Microseconds()), "p50-µs")
				b.ReportMetric(float64(t.p99.Microseconds()), "p99-µs")
				b.ReportMetric(float64(t.p999.Microseconds()), "p999-µs")
				b.ReportMetric(100*t.slowShare, "slow-%")
			}
		})
	}
}

// BenchmarkRollingDeploy replaces each of five loopback backends in turn
// by a cold one (+50 ms at its start, decaying to 0 over 5 s), one every
// 6 s, each old one drained for 1 s before it stops, under calls from 8
// goroutines, and reports the p50 and p99 of the calls made during the
// rollout divided by the steady state's p99 (5 s of calls before it), and
// the failed calls, for round_robin and muster_wrr and muster_p2c without
// and with slow start (a 10 s linear window from 10 %; for muster_wrr also
// a 20 s window from 0 with aggression 0.5, which keeps a cold backend's
// share below 1 % of the calls while it is cold):
//
//	go test -run '^$' -bench RollingDeploy -benchtime 1x ./bench/balancer/
func BenchmarkRollingDeploy(b *testing.B) {
	const slow = `{"slowStart":{"window":"10s","aggression":1,"minWeightPercent":10}}`
	const slower = `{"slowStart":{"window":"20s","aggression":0.5,"minWeightPercent":0}}`
	plan := rolloutPlan{backends: 5, concurrency: 8, steady: 5 * time.Second, step: 6 * time.Second,
		drain: time.Second, coldExtra: 50 * time.Millisecond, coldFor: 5 * time.Second}
	for _, ct := range []struct{ name, policy string }{
		{"round_robin", "round_robin"},
		{"muster_wrr", "muster_wrr"},
		{"muster_wrr+slowStart", "muster_wrr:" + slow},
		{"muster_wrr+slowStart20s", "muster_wrr:" + slower},
		{"muster_p2c", "muster_p2c"},
		{"muster_p2c+slowStart", "muster_p2c:" + slow},
	} {
		b.Run(ct.name, func(b *testing.B) {
			for b.Loop() {
				r, err := rollingDeploy(ct.policy, plan)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(r.steadyP99.Microseconds()), "steady-p99-µs")
				b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
				b.ReportMetric(float64(r.p50)/float64(r.steadyP99), "p50/steady-p99")
				b.ReportMetric(float64(r.p99)/float64(r.steadyP99), "p99/steady-p99")
				b.ReportMetric(float64(r.failed), "failed")
				b.ReportMetric(float64(r.calls), "calls")
			}
		})
	}
}
