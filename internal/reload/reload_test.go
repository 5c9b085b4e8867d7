package reload

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A Source loads again when a file is replaced or rewritten, not when
// nothing changed, keeps the last good value when a load fails (trying
// again only at the next change), and looks no more often than every.
func TestSource(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	write := func(text string) {
		tmp := name + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, name); err != nil {
			t.Fatal(err)
		}
	}
	loads := 0
	load := func() (string, error) {
		loads++
		b, err := os.ReadFile(name)
		if string(b) == "bad" {
			return "", errors.New("bad content")
		}
		return string(b), err
	}
	write("one")
	s, err := New(load, time.Second, name)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if v, changed, err := s.Get(t0); v != "one" || changed || err != nil || loads != 1 {
		t.Fatalf("unchanged: %q %v %v, %d loads; want one, not changed, 1 load", v, changed, err, loads)
	}
	write("two")
	if v, changed, _ := s.Get(t0.Add(500 * time.Millisecond)); v != "one" || changed {
		t.Errorf("within every of the last look: %q %v, want the old value", v, changed)
	}
	if v, changed, err := s.Get(t0.Add(2 * time.Second)); v != "two" || !changed || err != nil {
		t.Errorf("after a change: %q %v %v, want two, changed", v, changed, err)
	}
	write("bad")
	if v, changed, err := s.Get(t0.Add(4 * time.Second)); v != "two" || changed || err == nil {
		t.Errorf("a change that does not load: %q %v %v, want two kept and the error", v, changed, err)
	}
	n := loads
	if _, _, err := s.Get(t0.Add(6 * time.Second)); err != nil || loads != n {
		t.Errorf("the bad version again: %v, %d loads more; want no new load", err, loads-n)
	}
	if _, err := New(func() (string, error) { return "", errors.New("no") }, 0, name); err == nil {
		t.Error("New with a failing load: no error")
	}
}
