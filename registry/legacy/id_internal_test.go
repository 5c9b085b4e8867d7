package legacy

import (
	"net/url"
	"testing"

	"github.com/musterhq/muster/registry"
)

// FuzzInstanceID checks that escaped IDs are valid (when short enough) and
// distinct for distinct suffixes: unescaping gives the suffix back.
func FuzzInstanceID(f *testing.F) {
	for _, s := range []string{"7587867878", "a/b", "100%", "x y", "\xff", "a%2Fb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, suffix string) {
		if suffix == "" {
			return
		}
		id := instanceID(suffix)
		if len(id) <= registry.MaxIDLen {
			if err := registry.ValidateID(id); err != nil {
				t.Fatalf("instanceID(%q) = %q: %v", suffix, id, err)
			}
		}
		back, err := url.PathUnescape(id)
		if err != nil || back != suffix {
			t.Fatalf("instanceID(%q) = %q unescapes to %q, %v", suffix, id, back, err)
		}
	})
}
