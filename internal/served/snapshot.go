package served

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// snapshotVersion is the format version of a snapshot file.
const snapshotVersion = 1

// snapshotFile is what a snapshot file holds: the last good list of one
// service.
type snapshotFile struct {
	V       int       `json:"v"`
	Service string    `json:"service"`
	SavedAt time.Time `json:"saved_at"`
	// Revision and Generation are the registry's position the list was
	// read at (registry.Snapshot). Files written before Generation existed
	// have none: 0.
	Revision   int64             `json:"revision"`
	Generation uint64            `json:"generation,omitempty"`
	Instances  []json.RawMessage `json:"instances"` // registry.Marshal values
}

// position is where in the registry's history a snapshot was read:
// revisions compare only within one generation.
type position struct {
	gen uint64
	rev int64
}

// positionOf returns the position a snapshot was read at.
func positionOf(s registry.Snapshot) position {
	return position{gen: s.Generation, rev: s.Revision}
}

// snapshotStore writes and reads the disk snapshots of a Pipeline. Writes
// of one service are deduplicated by position, so many followers of a service
// write its file once per change.
type snapshotStore struct {
	dir string

	mu      sync.Mutex
	written map[string]savedList // service -> what its file holds
}

// savedList is what a service's file holds, as written by this store.
type savedList struct {
	at   position
	list []*registry.Instance
}

func (s *snapshotStore) path(service string) string {
	return filepath.Join(s.dir, service+".json")
}

// save writes list, the list served at position at of the service,
// atomically (temp file, fsync, rename), unless needs says the file holds
// it or will get a newer one. latest returns the service's current
// snapshot in the registry; it must not block.
func (s *snapshotStore) save(service string, at position, list []*registry.Instance, now time.Time, latest func() registry.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.needs(service, at, list, latest) {
		return nil
	}
	f := snapshotFile{V: snapshotVersion, Service: service, SavedAt: now.UTC(), Revision: at.rev, Generation: at.gen}
	for _, in := range list {
		v, err := registry.Marshal(*in)
		if err != nil {
			return fmt.Errorf("served: snapshot of %s: %w", service, err)
		}
		f.Instances = append(f.Instances, v)
	}
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("served: snapshot of %s: %w", service, err)
	}
	if err := writeAtomic(s.dir, s.path(service), data); err != nil {
		return fmt.Errorf("served: snapshot of %s: %w", service, err)
	}
	s.written[service] = savedList{at: at, list: list}
	return nil
}

// needs reports whether the list at position at must be written. s.mu must
// be held.
//
// Another generation is another history: its revisions say nothing about
// the file's, so it is written (and becomes what later positions compare
// with). Within a generation, a higher revision is written, and the same
// revision with the same list is not (another follower of the service
// wrote it). A lower revision comes either from a follower behind the
// others, which gets the newer list in its next update, or from a rewind
// the backend did not flag (etcd restarted empty, a backend that sets no
// generation): refusing it would freeze the file in the old history. The
// registry's latest snapshot tells them apart: after a rewind it is below
// what the file holds too. (A latest snapshot of yet another generation
// is written when its own update comes.)
func (s *snapshotStore) needs(service string, at position, list []*registry.Instance, latest func() registry.Snapshot) bool {
	saved, ok := s.written[service]
	last := saved.at
	switch {
	case !ok || at.gen != last.gen || at.rev > last.rev:
		return true
	case at.rev == last.rev:
		// The same list, unless an unflagged rewind reached the very
		// revision the file holds before the first save of its history.
		return !registry.EqualInstances(list, saved.list)
	default:
		cur := positionOf(latest())
		return cur.gen == last.gen && cur.rev < last.rev
	}
}

func writeAtomic(dir, path string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// errNoSnapshot reports that no snapshot file exists for a service.
var errNoSnapshot = errors.New("served: no snapshot")

// load reads the snapshot of service. A missing file is errNoSnapshot; a
// corrupt file, another version or another service's file is an error
// naming the problem, and nothing of it is used.
func (s *snapshotStore) load(service string) ([]*registry.Instance, time.Time, error) {
	data, err := os.ReadFile(s.path(service))
	if errors.Is(err, os.ErrNotExist) {
		return nil, time.Time{}, errNoSnapshot
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("served: read snapshot: %w", err)
	}
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, time.Time{}, fmt.Errorf("served: snapshot %s is corrupt: %w", s.path(service), err)
	}
	if f.V != snapshotVersion {
		return nil, time.Time{}, fmt.Errorf("served: snapshot %s has version %d, want %d", s.path(service), f.V, snapshotVersion)
	}
	if f.Service != service {
		return nil, time.Time{}, fmt.Errorf("served: snapshot %s is of service %q, not %q", s.path(service), f.Service, service)
	}
	list := make([]*registry.Instance, 0, len(f.Instances))
	for i, raw := range f.Instances {
		in, err := registry.Unmarshal(raw)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("served: snapshot %s: instance %d: %w", s.path(service), i, err)
		}
		if in.Name != service {
			return nil, time.Time{}, fmt.Errorf("served: snapshot %s: instance %d is of service %q", s.path(service), i, in.Name)
		}
		list = append(list, &in)
	}
	return list, f.SavedAt, nil
}
