package main

import (
	"testing"
	"time"
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
		one, closeConn, err := pickBench(c, p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p+"/single", func(b *testing.B) { benchPick(b, one, false) })
		b.Run(p+"/parallel", func(b *testing.B) { benchPick(b, one, true) })
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
