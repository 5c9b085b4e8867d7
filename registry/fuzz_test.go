package registry_test

import (
	"errors"
	"testing"

	"github.com/musterhq/muster/registry"
)

// FuzzUnmarshal feeds arbitrary bytes to the value codec: it must never
// panic, every rejection must be one of the documented errors, and a value
// it accepts must survive Marshal and Unmarshal unchanged.
func FuzzUnmarshal(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"id":"a","name":"user","addr":"10.0.0.7:9000"}`,
		`{"v":1,"id":"user-1","name":"user","version":"v1.4.2","addr":"[::1]:9000","zone":"eu-1a","weight":0,"metadata":{"color":"blue"},"registered_at":"2026-11-30T10:00:00Z"}`,
		`{"v":2,"id":"a","name":"user","addr":"h:1"}`,
		`{"v":1,"id":"a/b","name":"user","addr":"h:1"}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":10001}`,
		`not json`, `{}`, `[]`, `null`, "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := registry.Unmarshal(data)
		if err != nil {
			if !errors.Is(err, registry.ErrMalformedValue) && !errors.Is(err, registry.ErrUnsupportedVersion) && !errors.Is(err, registry.ErrInvalidInstance) {
				t.Fatalf("Unmarshal(%q) = %v, not a documented error", data, err)
			}
			return
		}
		again, err := registry.Marshal(in)
		if err != nil {
			t.Fatalf("Marshal of an accepted value %q: %v", data, err)
		}
		out, err := registry.Unmarshal(again)
		if err != nil {
			t.Fatalf("Unmarshal of re-marshalled %q: %v", again, err)
		}
		if !out.Equal(in.Normalize()) && !out.Equal(in) {
			t.Fatalf("round trip changed the instance:\n in %+v\nout %+v", in, out)
		}
	})
}
