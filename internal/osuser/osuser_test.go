package osuser_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/osuser"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestName(t *testing.T) {
	if n := osuser.Name(); n == "" || n != osuser.Clean(n) {
		t.Fatalf("Name() = %q, want a clean name", n)
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                  "alice",
		"bob\tsmith\n":           "bob?smith?",
		"bad\xffutf8":            "bad?utf8",
		strings.Repeat("é", 100): strings.Repeat("é", 64),
	} {
		if got := osuser.Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}
