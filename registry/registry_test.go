package registry_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func valid() registry.Instance {
	return registry.Instance{
		ID: "user-1", Name: "user", Version: "v1.4.2", Addr: "10.0.0.7:9000",
		Zone: "eu-1a", Weight: 100, Metadata: map[string]string{"color": "blue"},
	}
}

func TestValidateNamesTheBadField(t *testing.T) {
	bigMeta := map[string]string{}
	for i := 0; i <= registry.MaxMetadataKeys; i++ {
		bigMeta[fmt.Sprint("k", i)] = "v"
	}
	cases := []struct {
		name  string
		edit  func(*registry.Instance)
		field string
	}{
		{"empty name", func(in *registry.Instance) { in.Name = "" }, "name"},
		{"upper-case name", func(in *registry.Instance) { in.Name = "User" }, "name"},
		{"name starting with dash", func(in *registry.Instance) { in.Name = "-user" }, "name"},
		{"name with slash", func(in *registry.Instance) { in.Name = "a/b" }, "name"},
		{"name over 128", func(in *registry.Instance) { in.Name = strings.Repeat("a", 129) }, "name"},
		{"id with slash", func(in *registry.Instance) { in.ID = "a/b" }, "id"},
		{"id with space", func(in *registry.Instance) { in.ID = "a b" }, "id"},
		{"id over 128", func(in *registry.Instance) { in.ID = strings.Repeat("i", 129) }, "id"},
		{"empty addr", func(in *registry.Instance) { in.Addr = "" }, "addr"},
		{"addr without port", func(in *registry.Instance) { in.Addr = "10.0.0.7" }, "addr"},
		{"addr with port 0", func(in *registry.Instance) { in.Addr = "10.0.0.7:0" }, "addr"},
		{"addr with port 70000", func(in *registry.Instance) { in.Addr = "10.0.0.7:70000" }, "addr"},
		{"addr with named port", func(in *registry.Instance) { in.Addr = "10.0.0.7:http" }, "addr"},
		{"addr without host", func(in *registry.Instance) { in.Addr = ":9000" }, "addr"},
		{"addr with bad host", func(in *registry.Instance) { in.Addr = "a b:9000" }, "addr"},
		{"addr with a host longer than a DNS name", func(in *registry.Instance) {
			in.ID, in.Addr = "a", strings.Repeat("h", registry.MaxHostLen+1)+":9000"
		}, "addr"},
		{"addr with a 1.4 MB host", func(in *registry.Instance) { in.ID, in.Addr = "a", strings.Repeat("h", 1400000)+":9000" }, "addr"},
		{"weight negative", func(in *registry.Instance) { in.Weight = -1 }, "weight"},
		{"weight over max", func(in *registry.Instance) { in.Weight = registry.MaxWeight + 1 }, "weight"},
		{"version too long", func(in *registry.Instance) { in.Version = strings.Repeat("v", 129) }, "version"},
		{"zone too long", func(in *registry.Instance) { in.Zone = strings.Repeat("z", 129) }, "zone"},
		{"region too long", func(in *registry.Instance) { in.Region = strings.Repeat("r", 129) }, "region"},
		{"region not UTF-8", func(in *registry.Instance) { in.Region = "\xff" }, "region"},
		{"65 metadata keys", func(in *registry.Instance) { in.Metadata = bigMeta }, "metadata"},
		{"metadata key over 128", func(in *registry.Instance) { in.Metadata = map[string]string{strings.Repeat("k", 129): "v"} }, "metadata"},
		{"metadata value over 512", func(in *registry.Instance) { in.Metadata = map[string]string{"k": strings.Repeat("v", 513)} }, "metadata"},
		{"empty metadata key", func(in *registry.Instance) { in.Metadata = map[string]string{"": "v"} }, "metadata"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := valid()
			tc.edit(&in)
			err := in.Validate()
			var fe *registry.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field {
				t.Fatalf("Validate() names field %q (%v), want %q", fe.Field, err, tc.field)
			}
			if !errors.Is(err, registry.ErrInvalidInstance) {
				t.Fatalf("error %v does not match ErrInvalidInstance", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name field %q", err, tc.field)
			}
			if _, err := registry.Marshal(in); err == nil {
				t.Fatalf("Marshal accepted an invalid instance")
			}
		})
	}
}

func TestValidateAcceptsEdges(t *testing.T) {
	ok := []registry.Instance{
		valid(),
		{Name: "a", Addr: "[::1]:1"},
		{Name: strings.Repeat("a", 128), Addr: "host-name.example:65535", ID: strings.Repeat("i", 128)},
		{Name: "user", Addr: "10.0.0.7:9000", Weight: registry.MaxWeight},
		{Name: "0svc.v2_x-y", Addr: "svc:80", Draining: true},
		{Name: "user", ID: "a", Addr: strings.Repeat("h", registry.MaxHostLen) + ":9000"},
	}
	for _, in := range ok {
		if err := in.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", in, err)
		}
	}
}

func TestNormalizeDefaults(t *testing.T) {
	in := registry.Instance{Name: "user", Addr: "10.0.0.7:9000", Metadata: map[string]string{"a": "b"}}
	n := in.Normalize()
	if n.ID != "10.0.0.7:9000" || n.Weight != registry.DefaultWeight {
		t.Fatalf("Normalize = ID %q weight %d; want the addr and %d", n.ID, n.Weight, registry.DefaultWeight)
	}
	n.Metadata["a"] = "changed"
	if in.Metadata["a"] != "b" {
		t.Fatalf("Normalize shares its metadata map with the input")
	}
	if w := (registry.Instance{Weight: 7, Draining: true}).EffectiveWeight(); w != 0 {
		t.Fatalf("draining EffectiveWeight = %d, want 0", w)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	in := valid()
	in.RegisteredAt = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	data, err := registry.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"v":1`) {
		t.Fatalf("value %s has no schema version", data)
	}
	out, err := registry.Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Equal(in) {
		t.Fatalf("round trip changed the instance:\n in %+v\nout %+v", in, out)
	}

	drain := valid()
	drain.Draining = true
	data, _ = registry.Marshal(drain)
	if !strings.Contains(string(data), `"weight":0`) {
		t.Fatalf("draining value %s does not carry weight 0", data)
	}
	if out, _ := registry.Unmarshal(data); !out.Draining || out.EffectiveWeight() != 0 {
		t.Fatalf("weight 0 decoded as %+v, want draining", out)
	}
}

func TestUnmarshalDefaultsAndRejections(t *testing.T) {
	out, err := registry.Unmarshal([]byte(`{"v":1,"id":"a","name":"user","addr":"h:1","future":"ignored"}`))
	if err != nil {
		t.Fatalf("Unmarshal of a minimal value: %v", err)
	}
	if out.Weight != registry.DefaultWeight || out.Draining {
		t.Fatalf("missing weight decoded as %d (draining %v), want %d", out.Weight, out.Draining, registry.DefaultWeight)
	}
	bad := []struct {
		value string
		want  error
	}{
		{`not json`, registry.ErrMalformedValue},
		{`{"v":1,"id":"a","name":"user","addr":"h:1"} extra`, registry.ErrMalformedValue},
		{`[1,2]`, registry.ErrMalformedValue},
		{`{"v":2,"id":"a","name":"user","addr":"h:1"}`, registry.ErrUnsupportedVersion},
		{`{"id":"a","name":"user","addr":"h:1"}`, registry.ErrUnsupportedVersion},
		{`{"v":1,"name":"user","addr":"h:1"}`, registry.ErrInvalidInstance},
		{`{"v":1,"id":"a","name":"user","addr":"h"}`, registry.ErrInvalidInstance},
		{`{"v":1,"id":"a","name":"user","addr":"h:1","weight":10001}`, registry.ErrInvalidInstance},
		{`{"v":1,"id":"a","name":"user","addr":"h:1","registered_at":"yesterday"}`, registry.ErrMalformedValue},
	}
	for _, b := range bad {
		if _, err := registry.Unmarshal([]byte(b.value)); !errors.Is(err, b.want) {
			t.Errorf("Unmarshal(%s) = %v, want %v", b.value, err, b.want)
		}
	}
}

func TestKeyLayout(t *testing.T) {
	if got := registry.Key("/muster/services/", "user", "a:1"); got != "/muster/services/user/a:1" {
		t.Fatalf("Key = %q", got)
	}
	if got := registry.ServicePrefix(registry.DefaultPrefix, "foo"); got != "/muster/services/foo/" {
		t.Fatalf("ServicePrefix = %q; the trailing slash keeps foo from matching foobar", got)
	}
	svc, id, err := registry.ParseKey(registry.DefaultPrefix, "/muster/services/user/a:1")
	if err != nil || svc != "user" || id != "a:1" {
		t.Fatalf("ParseKey = %q %q %v", svc, id, err)
	}
	for _, k := range []string{"/other/user/a", "/muster/services/user", "/muster/services/user/", "/muster/services/user/a/b"} {
		if _, _, err := registry.ParseKey(registry.DefaultPrefix, k); err == nil {
			t.Errorf("ParseKey(%q) accepted a malformed key", k)
		}
	}
}

func TestMergeSortedOrdersByIDThenList(t *testing.T) {
	in := func(id, addr string) *registry.Instance { return &registry.Instance{ID: id, Addr: addr} }
	a := []*registry.Instance{in("a", "1"), in("c", "1")}
	b := []*registry.Instance{in("a", "2"), in("b", "2"), in("d", "2")}
	got := registry.MergeSorted(a, nil, b)
	want := []string{"a/1", "a/2", "b/2", "c/1", "d/2"}
	if len(got) != len(want) {
		t.Fatalf("%d instances, want %d", len(got), len(want))
	}
	for i, w := range want {
		if g := got[i].ID + "/" + got[i].Addr; g != w {
			t.Fatalf("instance %d = %s, want %s (by ID, then the lists' order)", i, g, w)
		}
	}
	if len(registry.MergeSorted()) != 0 {
		t.Fatal("no lists merged into some instances")
	}
}
