// Package reload keeps a value read from files (certificates, a password
// file, an htpasswd file) current without a restart: the files are looked
// at when the value is asked for, and read again when one of them is
// another version than the one read. It needs no goroutine and no timer:
// a rotation is seen by the next use of the value.
package reload

import (
	"os"
	"sync"
	"time"
)

// Source is a value loaded from files, loaded again when one of them
// changes: another file under the name (a file replaced by a rename), or
// another size or modification time.
type Source[T any] struct {
	names []string
	load  func() (T, error)
	every time.Duration // the least time between two looks at the files

	mu     sync.Mutex
	looked time.Time     // the last look
	stamps []os.FileInfo // of the files when last loaded, or tried; nil entries for missing files
	value  T             // from the last files that loaded
}

// New loads the value from the files names with load and returns its
// Source, or load's error. Get looks at the files again at most once
// every every (0: at each Get).
func New[T any](load func() (T, error), every time.Duration, names ...string) (*Source[T], error) {
	s := &Source[T]{names: names, load: load, every: every}
	s.stamps = s.stat()
	v, err := load()
	if err != nil {
		return nil, err
	}
	s.value = v
	return s, nil
}

// Get returns the value, loaded again first if the files changed since
// they were last loaded (looked at no more than once every every, as of
// now). changed is true when the value is new; err is the error of
// loading changed files, which leaves the last value that loaded (they
// are loaded again at their next change, not at every Get).
func (s *Source[T]) Get(now time.Time) (v T, changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.every > 0 && now.Sub(s.looked) < s.every {
		return s.value, false, nil
	}
	s.looked = now
	stamps := s.stat()
	if same(stamps, s.stamps) {
		return s.value, false, nil
	}
	// Stamped before loading: a file that changes while it is read is read
	// again at the next look.
	s.stamps = stamps
	v, err = s.load()
	if err != nil {
		return s.value, false, err
	}
	s.value = v
	return v, true, nil
}

// Current returns the value last loaded, without looking at the files.
func (s *Source[T]) Current() T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

func (s *Source[T]) stat() []os.FileInfo {
	out := make([]os.FileInfo, len(s.names))
	for i, name := range s.names {
		if fi, err := os.Stat(name); err == nil {
			out[i] = fi
		}
	}
	return out
}

// same reports whether two sets of stamps name the same versions of files.
func same(a, b []os.FileInfo) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()):
			return false
		}
	}
	return true
}
