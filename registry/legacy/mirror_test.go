package legacy_test

import (
	"strings"
	"testing"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// layout is what each legacy type is: read and written.
type layout interface {
	etcd.Layout
	etcd.Mirror
}

// FuzzMirrorDecode checks that what a mirror writes, each layout reads back
// as the same instance (address, version and metadata as each layout
// carries them).
func FuzzMirrorDecode(f *testing.F) {
	f.Add("a1", "10.0.0.7:9000", "v1", "color", "blue")
	f.Add("127.0.0.1:9", "host.example:1", "", "", "")
	f.Fuzz(func(t *testing.T, id, addr, version, mk, mv string) {
		in := registry.Instance{Name: "svc", ID: id, Addr: addr, Version: version}
		if mk != "" {
			in.Metadata = map[string]string{mk: mv}
		}
		if in.Validate() != nil {
			return
		}
		in = in.Normalize() // an empty ID becomes the address
		id = in.ID
		// The layouts take the ID from the key, and read '%' (the one byte of
		// a valid ID that instanceID escapes) as "%25", so that distinct
		// legacy keys stay distinct IDs.
		keyID := strings.ReplaceAll(id, "%", "%25")
		g, k, n := mustLayouts(t)
		for _, c := range []struct {
			name string
			l    layout
			want registry.Instance
		}{
			{"gozero", g, registry.Instance{Name: "svc", ID: keyID, Addr: addr}},
			{"kratos", k, registry.Instance{Name: "svc", ID: keyID, Addr: addr, Version: version, Metadata: in.Metadata}},
			{"naming", n, registry.Instance{Name: "svc", ID: keyID, Addr: addr, Metadata: in.Metadata}},
		} {
			key, val, err := c.l.Mirror(in)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			suffix, ok := strings.CutPrefix(key, c.l.Prefix("svc"))
			if !ok {
				t.Fatalf("%s: key %q not under %q", c.name, key, c.l.Prefix("svc"))
			}
			got, err := c.l.Decode("svc", suffix, val)
			if err != nil {
				t.Fatalf("%s: decoding %q: %v", c.name, val, err)
			}
			if !got.Equal(c.want) {
				t.Fatalf("%s: wrote %+v, read %+v", c.name, c.want, got)
			}
		}
	})
}
