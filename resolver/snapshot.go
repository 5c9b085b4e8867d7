package resolver

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
	V         int               `json:"v"`
	Service   string            `json:"service"`
	SavedAt   time.Time         `json:"saved_at"`
	Revision  int64             `json:"revision"`
	Instances []json.RawMessage `json:"instances"` // registry.Marshal values
}

// snapshotStore writes and reads the disk snapshots of a Builder. Writes of
// one service are deduplicated by revision, so many channels of a service
// write its file once per change.
type snapshotStore struct {
	dir string

	mu      sync.Mutex
	written map[string]int64 // service -> revision last written
}

func (s *snapshotStore) path(service string) string {
	return filepath.Join(s.dir, service+".json")
}

// save writes list atomically (temp file, fsync, rename) unless rev was
// written already.
func (s *snapshotStore) save(service string, rev int64, list []*registry.Instance, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written[service] >= rev {
		return nil
	}
	f := snapshotFile{V: snapshotVersion, Service: service, SavedAt: now.UTC(), Revision: rev}
	for _, in := range list {
		v, err := registry.Marshal(*in)
		if err != nil {
			return fmt.Errorf("resolver: snapshot of %s: %w", service, err)
		}
		f.Instances = append(f.Instances, v)
	}
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := writeAtomic(s.dir, s.path(service), data); err != nil {
		return fmt.Errorf("resolver: snapshot of %s: %w", service, err)
	}
	s.written[service] = rev
	return nil
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
var errNoSnapshot = errors.New("resolver: no snapshot")

// load reads the snapshot of service. A missing file is errNoSnapshot; a
// corrupt file, another version or another service's file is an error
// naming the problem, and nothing of it is used.
func (s *snapshotStore) load(service string) ([]*registry.Instance, time.Time, error) {
	data, err := os.ReadFile(s.path(service))
	if errors.Is(err, os.ErrNotExist) {
		return nil, time.Time{}, errNoSnapshot
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("resolver: read snapshot: %w", err)
	}
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, time.Time{}, fmt.Errorf("resolver: snapshot %s is corrupt: %w", s.path(service), err)
	}
	if f.V != snapshotVersion {
		return nil, time.Time{}, fmt.Errorf("resolver: snapshot %s has version %d, want %d", s.path(service), f.V, snapshotVersion)
	}
	if f.Service != service {
		return nil, time.Time{}, fmt.Errorf("resolver: snapshot %s is of service %q, not %q", s.path(service), f.Service, service)
	}
	list := make([]*registry.Instance, 0, len(f.Instances))
	for i, raw := range f.Instances {
		in, err := registry.Unmarshal(raw)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("resolver: snapshot %s: instance %d: %w", s.path(service), i, err)
		}
		if in.Name != service {
			return nil, time.Time{}, fmt.Errorf("resolver: snapshot %s: instance %d is of service %q", s.path(service), i, in.Name)
		}
		list = append(list, &in)
	}
	return list, f.SavedAt, nil
}
