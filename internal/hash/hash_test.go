package hash

import "testing"

// FNV-1a's published test vectors, and the finalizer spreading them.
func TestFNV64aVectors(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want uint64
	}{{"", 0xcbf29ce484222325}, {"a", 0xaf63dc4c8601ec8c}, {"foobar", 0x85944171f73967e8}} {
		if got := FNV64a(Offset64, tc.s); got != tc.want {
			t.Errorf("FNV64a(%q) = %#x, want %#x", tc.s, got, tc.want)
		}
	}
	if String("user-1") == String("user-2") || Mix64(0) != 0 {
		t.Error("String does not tell user-1 from user-2, or Mix64(0) != 0")
	}
}
