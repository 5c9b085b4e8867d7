package registry_test

import (
	"errors"
	"testing"

	"github.com/musterhq/muster/registry"
)

func TestOverrideCodecAndApply(t *testing.T) {
	zero, two := 0, 200
	for _, o := range []registry.Override{{Weight: &zero}, {Weight: &two}, {}} {
		data, err := registry.MarshalOverride(o)
		if err != nil {
			t.Fatal(err)
		}
		back, err := registry.UnmarshalOverride(data)
		if err != nil {
			t.Fatalf("UnmarshalOverride(%s): %v", data, err)
		}
		if (o.Weight == nil) != (back.Weight == nil) || (o.Weight != nil && *o.Weight != *back.Weight) {
			t.Fatalf("round trip of %s changed it", data)
		}
	}
	in := registry.Instance{Name: "s", ID: "a", Addr: "h:1", Weight: 100}
	if got := (registry.Override{Weight: &zero}).Apply(in); !got.Draining || got.EffectiveWeight() != 0 {
		t.Fatalf("a weight-0 override gives %+v, want draining", got)
	}
	if got := (registry.Override{Weight: &two}).Apply(in); got.EffectiveWeight() != 200 {
		t.Fatalf("a weight-200 override gives weight %d", got.EffectiveWeight())
	}
	self := in
	self.Draining = true // drained by its own health
	if got := (registry.Override{Weight: &two}).Apply(self); !got.Draining || got.EffectiveWeight() != 0 {
		t.Fatalf("a weight-200 override of an instance registered draining gives %+v, want it still draining", got)
	}
	bad := 10001
	if _, err := registry.MarshalOverride(registry.Override{Weight: &bad}); !errors.Is(err, registry.ErrInvalidInstance) {
		t.Fatalf("MarshalOverride of weight 10001 = %v, want ErrInvalidInstance", err)
	}
	for value, want := range map[string]error{
		`nope`:                 registry.ErrMalformedValue,
		`{"v":2,"weight":1}`:   registry.ErrUnsupportedVersion,
		`{"v":1,"weight":-1}`:  registry.ErrInvalidInstance,
		`{"v":1,"weight":"x"}`: registry.ErrMalformedValue,
	} {
		if _, err := registry.UnmarshalOverride([]byte(value)); !errors.Is(err, want) {
			t.Errorf("UnmarshalOverride(%s) = %v, want %v", value, err, want)
		}
	}
}

func TestOverrideKeys(t *testing.T) {
	k := registry.OverrideKey(registry.DefaultPrefix, "user", "a:1")
	if k != "/muster/services/user/a:1/override" {
		t.Fatalf("OverrideKey = %q", k)
	}
	inst, ok := registry.ParseOverrideKey(registry.DefaultPrefix, k)
	if !ok || inst != "/muster/services/user/a:1" {
		t.Fatalf("ParseOverrideKey = %q, %v", inst, ok)
	}
	for _, bad := range []string{"/muster/services/user/a:1", "/muster/services/user/override", "/other/user/a/override", "/muster/services/user/a/b/override"} {
		if _, ok := registry.ParseOverrideKey(registry.DefaultPrefix, bad); ok {
			t.Errorf("ParseOverrideKey(%q) accepted it", bad)
		}
	}
}
