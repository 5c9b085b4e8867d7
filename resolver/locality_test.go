package resolver

import (
	"reflect"
	"testing"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/registry"
)

// A state carries the client's locality when the channel has one and the
// zone fallback is on (the balancer then prefers the near instances); not
// without a locality, nor when the fallback is off (the resolver already
// kept only the near ones). The canary rides along.
func TestStatesCarryTheLocality(t *testing.T) {
	for _, tc := range []struct {
		name     string
		q        query
		fallback bool
		want     Locality
		ok       bool
	}{
		{"zone", query{Target: served.Target{Zone: "z1"}}, true, Locality{Zone: "z1"}, true},
		{"region and zone", query{Target: served.Target{Region: "r1", Zone: "z1"}}, true, Locality{Region: "r1", Zone: "z1"}, true},
		{"region", query{Target: served.Target{Region: "r1"}}, true, Locality{Region: "r1"}, true},
		{"none", query{}, true, Locality{}, false},
		{"no fallback", query{Target: served.Target{Zone: "z1"}}, false, Locality{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &musterResolver{b: &Builder{opts: options{served: served.Config{ZoneFallback: tc.fallback}}}, q: tc.q}
			l := served.List{Canary: registry.Canary{Color: "blue", Percent: 5}}
			st := grpcresolver.State{Attributes: r.stateAttributes(l)}
			got, ok := LocalityOf(st)
			if got != tc.want || ok != tc.ok {
				t.Errorf("LocalityOf = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
			if c, ok := CanaryOf(st); !ok || c.Color != "blue" {
				t.Errorf("the canary is lost: %+v, %v", c, ok)
			}
		})
	}
}

// The call policy rides along with the canary and the locality; a policy
// that sets nothing is not carried.
func TestStatesCarryThePolicy(t *testing.T) {
	p := (registry.Policy{Timeout: 800_000_000, Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}}}).Normalize()
	r := &musterResolver{b: &Builder{opts: options{served: served.Config{ZoneFallback: true}}}, q: query{Target: served.Target{Zone: "z1"}}}
	l := served.List{Canary: registry.Canary{Color: "blue", Percent: 5}, Policy: p}
	st := grpcresolver.State{Attributes: r.stateAttributes(l)}
	if got, ok := PolicyOf(st); !ok || !reflect.DeepEqual(got, p) {
		t.Errorf("PolicyOf = %+v, %v; want %+v", got, ok, p)
	}
	if _, ok := LocalityOf(st); !ok {
		t.Error("the locality is lost")
	}
	if _, ok := CanaryOf(st); !ok {
		t.Error("the canary is lost")
	}
	l.Policy = registry.Policy{}
	if _, ok := PolicyOf(grpcresolver.State{Attributes: r.stateAttributes(l)}); ok {
		t.Error("a zero policy is carried")
	}
	// Equal states compare equal (gRPC compares attributes).
	a, b := r.stateAttributes(l), r.stateAttributes(l)
	if !a.Equal(b) {
		t.Error("equal attributes differ")
	}
}
