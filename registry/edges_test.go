package registry_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/musterhq/muster/registry"
)

// The edges of every validation rule: the last value accepted and the first
// refused, on both sides of each character class and length limit.
func TestValidationEdges(t *testing.T) {
	base := func() registry.Instance { return registry.Instance{Name: "user", ID: "a", Addr: "10.0.0.7:9000"} }
	md := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := 0; i < n; i++ {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	for _, tc := range []struct {
		what  string
		edit  func(*registry.Instance)
		valid bool
	}{
		{"name starting with a", func(in *registry.Instance) { in.Name = "a1" }, true},
		{"name starting with z", func(in *registry.Instance) { in.Name = "z1" }, true},
		{"name starting with 0", func(in *registry.Instance) { in.Name = "0a" }, true},
		{"name starting with 9", func(in *registry.Instance) { in.Name = "9a" }, true},
		{"name starting with `", func(in *registry.Instance) { in.Name = "`a" }, false},
		{"name starting with {", func(in *registry.Instance) { in.Name = "{a" }, false},
		{"name starting with /", func(in *registry.Instance) { in.Name = "/a" }, false},
		{"name starting with :", func(in *registry.Instance) { in.Name = ":a" }, false},
		{"name with z and 9 inside", func(in *registry.Instance) { in.Name = "az9" }, true},
		{"name with { inside", func(in *registry.Instance) { in.Name = "a{" }, false},
		{"name with : inside", func(in *registry.Instance) { in.Name = "a:" }, false},
		{"id with !", func(in *registry.Instance) { in.ID = "a!" }, true},
		{"id with a space", func(in *registry.Instance) { in.ID = "a b" }, false},
		{"id with ~", func(in *registry.Instance) { in.ID = "a~" }, true},
		{"id with DEL", func(in *registry.Instance) { in.ID = "a\x7f" }, false},
		{"host with a, z, A, Z, 0, 9", func(in *registry.Instance) { in.Addr = "azAZ09.-_:80" }, true},
		{"host with `", func(in *registry.Instance) { in.Addr = "a`:80" }, false},
		{"host with {", func(in *registry.Instance) { in.Addr = "a{:80" }, false},
		{"host with @", func(in *registry.Instance) { in.Addr = "a@:80" }, false},
		{"host with [ inside", func(in *registry.Instance) { in.Addr = "a[b:80" }, false},
		{"host with /", func(in *registry.Instance) { in.Addr = "a/:80" }, false},
		{"host with ;", func(in *registry.Instance) { in.Addr = "a;:80" }, false},
		{"version at its limit", func(in *registry.Instance) { in.Version = strings.Repeat("v", registry.MaxVersionLen) }, true},
		{"version over its limit", func(in *registry.Instance) { in.Version = strings.Repeat("v", registry.MaxVersionLen+1) }, false},
		{"zone at its limit", func(in *registry.Instance) { in.Zone = strings.Repeat("z", registry.MaxZoneLen) }, true},
		{"zone over its limit", func(in *registry.Instance) { in.Zone = strings.Repeat("z", registry.MaxZoneLen+1) }, false},
		{"region at its limit", func(in *registry.Instance) { in.Region = strings.Repeat("r", registry.MaxRegionLen) }, true},
		{"region over its limit", func(in *registry.Instance) { in.Region = strings.Repeat("r", registry.MaxRegionLen+1) }, false},
		{"metadata at its key count", func(in *registry.Instance) { in.Metadata = md(registry.MaxMetadataKeys) }, true},
		{"metadata over its key count", func(in *registry.Instance) { in.Metadata = md(registry.MaxMetadataKeys + 1) }, false},
	} {
		in := base()
		tc.edit(&in)
		err := in.Validate()
		if (err == nil) != tc.valid {
			t.Errorf("%s: Validate = %v, want valid %v", tc.what, err, tc.valid)
		}
	}
}

// An override's weight is 0..MaxWeight, both ends included.
func TestOverrideWeightEdges(t *testing.T) {
	for w, valid := range map[int]bool{-1: false, 0: true, registry.MaxWeight: true, registry.MaxWeight + 1: false} {
		_, err := registry.MarshalOverride(registry.Override{Weight: &w})
		if (err == nil) != valid {
			t.Errorf("override weight %d: %v, want valid %v", w, err, valid)
		}
	}
}
