package p2c

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/metadata"

	"github.com/musterhq/muster/balancer/internal/lb"
	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
)

// routedPickers returns a p2c picker over three base endpoints, and the
// same behind lb's color routing with a blue picker over two more.
func routedPickers(det *lb.Detector, cn registry.Canary) (plain *picker, routed balancer.Picker) {
	ms := time.Millisecond
	clock := &fakeClock{t: nanotime()}
	plain = newTestPicker(clock, det, testEndpoint{addr: "a", cost: ms}, testEndpoint{addr: "b", cost: ms}, testEndpoint{addr: "c", cost: ms})
	blue := newTestPicker(clock, det, testEndpoint{addr: "x", cost: ms}, testEndpoint{addr: "y", cost: ms})
	plain.sampler, blue.sampler = new(sampler), new(sampler) // adaptive, as in a balancer
	return plain, lb.NewRoutePicker(Name, lb.DefaultColorConfig(), cn, plain, map[string]balancer.Picker{"blue": blue})
}

func TestRoutedPickDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items; run without -race")
	}
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	_, routed := routedPickers(det, registry.Canary{})
	_, canary := routedPickers(det, registry.Canary{Color: "blue", Percent: 5})
	bg := context.Background()
	withMD := metadata.AppendToOutgoingContext(bg, "x-user", "42") // other metadata, no color
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"uncolored", bg},
		{"uncolored with other metadata", withMD},
		{"blue by WithColor", color.WithColor(withMD, "blue")},
		{"green (falls back)", color.WithColor(bg, "green")},
		{"uncolored with a canary key", color.WithKey(withMD, "user-42")},
	} {
		info := balancer.PickInfo{Ctx: tc.ctx}
		for _, p := range []struct {
			name string
			p    balancer.Picker
		}{{"no canary", routed}, {"canary 5%", canary}} {
			if n := testing.AllocsPerRun(10000, func() {
				res, _ := p.p.Pick(info)
				res.Done(ok)
			}); n != 0 {
				t.Errorf("routed Pick+Done (%s, %s) allocates %v times per call, want 0", tc.name, p.name, n)
			}
		}
	}
	// A color set as plain metadata, not by WithColor, costs the copy
	// metadata.ValueFromOutgoingContext makes (documented in package color).
	info := balancer.PickInfo{Ctx: metadata.AppendToOutgoingContext(bg, color.Header, "blue")}
	n := testing.AllocsPerRun(10000, func() {
		res, _ := routed.Pick(info)
		res.Done(ok)
	})
	t.Logf("routed Pick+Done with the color as plain metadata: %v allocations", n)
	if n > 1 {
		t.Errorf("routed Pick+Done with the color as plain metadata allocates %v times per call, want at most 1", n)
	}
}

// BenchmarkRoutedPick compares Pick+Done on a plain picker with the same
// behind color routing, for an uncolored and a blue call, each with a
// context as gRPC hands it (a few values deep).
func BenchmarkRoutedPick(b *testing.B) {
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	plain, routed := routedPickers(det, registry.Canary{})
	_, canary := routedPickers(det, registry.Canary{Color: "blue", Percent: 5})
	base := metadata.AppendToOutgoingContext(context.Background(), "x-user", "42")
	base, cancel := context.WithTimeout(base, time.Hour)
	defer cancel()
	blue := color.WithColor(base, "blue")
	for _, bc := range []struct {
		name string
		p    balancer.Picker
		ctx  context.Context
	}{{"plain", plain, base}, {"routed/uncolored", routed, base}, {"routed/blue", routed, blue},
		{"canary5/uncolored", canary, base}, {"canary5/keyed", canary, color.WithKey(base, "user-42")}} {
		b.Run(bc.name, func(b *testing.B) {
			info := balancer.PickInfo{Ctx: bc.ctx}
			b.ReportAllocs()
			for b.Loop() {
				res, _ := bc.p.Pick(info)
				res.Done(ok)
			}
		})
	}
}
