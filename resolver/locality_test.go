package resolver

import (
	"reflect"
	"testing"

	grpcresolver "google.golang.org/grpc/resolver"

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
		{"zone", query{zone: "z1"}, true, Locality{Zone: "z1"}, true},
		{"region and zone", query{region: "r1", zone: "z1"}, true, Locality{Region: "r1", Zone: "z1"}, true},
		{"region", query{region: "r1"}, true, Locality{Region: "r1"}, true},
		{"none", query{}, true, Locality{}, false},
		{"no fallback", query{zone: "z1"}, false, Locality{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &musterResolver{b: &Builder{opts: options{zoneFallback: tc.fallback}}, q: tc.q,
				canary: registry.Canary{Color: "blue", Percent: 5}}
			st := grpcresolver.State{Attributes: r.stateAttributes()}
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
	r := &musterResolver{b: &Builder{opts: options{zoneFallback: true}}, q: query{zone: "z1"},
		canary: registry.Canary{Color: "blue", Percent: 5}, policy: p}
	st := grpcresolver.State{Attributes: r.stateAttributes()}
	if got, ok := PolicyOf(st); !ok || !reflect.DeepEqual(got, p) {
		t.Errorf("PolicyOf = %+v, %v; want %+v", got, ok, p)
	}
	if _, ok := LocalityOf(st); !ok {
		t.Error("the locality is lost")
	}
	if _, ok := CanaryOf(st); !ok {
		t.Error("the canary is lost")
	}
	r.policy = registry.Policy{}
	if _, ok := PolicyOf(grpcresolver.State{Attributes: r.stateAttributes()}); ok {
		t.Error("a zero policy is carried")
	}
	// Equal states compare equal (gRPC compares attributes).
	a, b := r.stateAttributes(), r.stateAttributes()
	if !a.Equal(b) {
		t.Error("equal attributes differ")
	}
}
