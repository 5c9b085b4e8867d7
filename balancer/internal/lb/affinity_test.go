package lb

import (
	"context"
	"fmt"
	"math"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/metadata"
)

// namedPicker returns its name as the picked SubConn's stand-in, through
// the error, so tests can tell endpoints apart without connections.
type namedPicker string

func (n namedPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, fmt.Errorf("%s", string(n))
}

// fixedPicker picks nothing, without allocating.
type fixedPicker struct{}

func (fixedPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, nil
}

func affinityOver(t *testing.T, weights ...int) (*affinityPicker, []*Endpoint[struct{}]) {
	t.Helper()
	ready := make([]Ready[struct{}], len(weights))
	eps := make([]*Endpoint[struct{}], len(weights))
	for i, w := range weights {
		addr := fmt.Sprintf("10.0.0.%d:80", i+1)
		eps[i] = &Endpoint[struct{}]{Addr: addr, key: addr}
		ready[i] = Ready[struct{}]{Endpoint: eps[i], Picker: namedPicker(addr), Weight: w}
	}
	d := &Detector{name: "test"}
	return newAffinityPicker(namedPicker("inner"), "x-user", ready, d, true), eps
}

func pickName(p balancer.Picker, key string) string {
	ctx := context.Background()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", key)
	}
	_, err := p.Pick(balancer.PickInfo{Ctx: ctx})
	return err.Error()
}

func TestAffinityKeepsAKeyOnOneEndpointByWeight(t *testing.T) {
	p, _ := affinityOver(t, 100, 100, 200)
	if got := pickName(p, ""); got != "inner" {
		t.Fatalf("a call without a key went to %s; want the policy's picker", got)
	}
	const keys = 20000
	by := map[string]int{}
	for k := range keys {
		key := fmt.Sprint("user-", k)
		a := pickName(p, key)
		if b := pickName(p, key); a != b {
			t.Fatalf("key %s went to %s, then %s", key, a, b)
		}
		by[a]++
	}
	// Shares 1/4, 1/4, 1/2; the binomial standard deviation over 20,000
	// keys is at most 0.35 %: allow 2 %.
	for addr, want := range map[string]float64{"10.0.0.1:80": 0.25, "10.0.0.2:80": 0.25, "10.0.0.3:80": 0.5} {
		if got := float64(by[addr]) / keys; math.Abs(got-want) > 0.02 {
			t.Errorf("%s took %.3f of the keys, want %.2f by weight (%v)", addr, got, want, by)
		}
	}
}

func TestAffinitySkipsEjectedAndMovesOnlyTheirKeys(t *testing.T) {
	p, eps := affinityOver(t, 100, 100, 100)
	before := map[string]string{}
	for k := range 3000 {
		key := fmt.Sprint("user-", k)
		before[key] = pickName(p, key)
	}
	eps[0].Outlier.until.Store(1) // ejected
	for key, was := range before {
		now := pickName(p, key)
		switch {
		case now == eps[0].Addr:
			t.Fatalf("key %s still on the ejected endpoint", key)
		case was != eps[0].Addr && now != was:
			t.Fatalf("key %s moved from %s to %s, though its endpoint is not ejected", key, was, now)
		}
	}
	for _, e := range eps {
		e.Outlier.until.Store(1)
	}
	if got := pickName(p, "user-1"); got != "inner" {
		t.Fatalf("with every endpoint ejected a keyed call went to %s; want the policy's picker", got)
	}
}

// BenchmarkAffinityPick is a keyed pick over 5 and 50 endpoints, and a
// call without a key through the affinityPicker beside the policy's
// picker alone.
func BenchmarkAffinityPick(b *testing.B) {
	p, _ := affinityOver(&testing.T{}, 100, 100)
	p.inner = fixedPicker{}
	plain := balancer.PickInfo{Ctx: context.Background()}
	b.Run("keyless/policy-picker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = p.inner.Pick(plain)
		}
	})
	b.Run("keyless/affinity", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = p.Pick(plain)
		}
	})
	for _, n := range []int{5, 50} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ws := make([]int, n)
			for i := range ws {
				ws[i] = 100
			}
			p, _ := affinityOver(&testing.T{}, ws...)
			for i := range p.eps {
				p.eps[i].picker = fixedPicker{}
			}
			info := balancer.PickInfo{Ctx: metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.Pick(info)
			}
		})
	}
}
