package etcdtest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Backup returns a copy of the data directory of a single-member cluster,
// in a temporary directory of t, for Restore. It is a copy taken after a
// graceful Stop, not an etcd snapshot (clientv3 Maintenance.Snapshot):
// restoring a snapshot needs etcdutl, and a copy keeps the WAL, the
// member ID and the cluster ID. The member is stopped for the copy and
// restarted at once (unless it was stopped already), so clients see a
// short outage: their requests fail or wait, and their watches resume
// afterwards. It fails the test for a cluster of more than one member
// and if the member does not stop or start again.
func (c *Cluster) Backup(t testing.TB) string {
	t.Helper()
	m := c.single(t, "Backup")
	dst := filepath.Join(t.TempDir(), "etcd-backup")
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.retired {
		t.Fatalf("etcdtest: Backup: the cluster is closed")
	}
	running := m.Running()
	if running {
		if err := m.stopLocked(false); err != nil {
			t.Fatalf("etcdtest: Backup: stop %s: %v", m.name, err)
		}
	}
	if err := copyDir(m.dir, dst); err != nil {
		t.Fatalf("etcdtest: Backup: copy %s: %v", m.dir, err)
	}
	if running {
		if err := m.startLocked("existing", time.Now().Add(startTimeout)); err != nil {
			t.Fatalf("etcdtest: Backup: restart %s: %v", m.name, err)
		}
	}
	return dst
}

// Restore rewinds a single-member cluster to a backup made by Backup of
// the same cluster: it kills the member, replaces its data directory with
// a copy of the backup and starts it again on the same ports, then waits
// until it serves. The cluster ID and the member ID stay the same (they
// are in the backup); the revision and every key, lease and watchable
// event go back to what they were at the backup, so clients see
// revisions going backwards, as after an operator restores a backup. It
// fails the test for a cluster of more than one member and if the member
// is not serving within 15 seconds.
func (c *Cluster) Restore(t testing.TB, backup string) {
	t.Helper()
	m := c.single(t, "Restore")
	if _, err := os.Stat(filepath.Join(backup, "member")); err != nil {
		t.Fatalf("etcdtest: Restore: %s is not a backup made by Backup: %v", backup, err)
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.retired {
		t.Fatalf("etcdtest: Restore: the cluster is closed")
	}
	if err := m.stopLocked(true); err != nil {
		t.Fatalf("etcdtest: Restore: stop %s: %v", m.name, err)
	}
	if err := os.RemoveAll(m.dir); err != nil {
		t.Fatalf("etcdtest: Restore: remove %s: %v", m.dir, err)
	}
	if err := copyDir(backup, m.dir); err != nil {
		t.Fatalf("etcdtest: Restore: copy %s: %v", backup, err)
	}
	if err := m.startLocked("existing", time.Now().Add(startTimeout)); err != nil {
		t.Fatalf("etcdtest: Restore: start %s: %v", m.name, err)
	}
}

// Wipe restarts the cluster empty: it kills every member, deletes their
// data directories and starts them as a new cluster on the same ports
// (and proxies), as an operator who recreates a lost cluster does. The
// new cluster has a new cluster ID and new member IDs (Member.ID), and its
// revisions start again from 1; clients that kept a revision see it go
// backwards. WithAuth, RootUser is created and authentication enabled
// again. It works for any cluster size and waits, as Start does, until a
// leader is elected and every member serves; it fails the test if that
// takes more than 15 seconds.
func (c *Cluster) Wipe(t testing.TB) {
	t.Helper()
	for _, m := range c.members {
		m.opMu.Lock()
		defer m.opMu.Unlock()
		if m.retired {
			t.Fatalf("etcdtest: Wipe: the cluster is closed")
		}
	}
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { errs[i] = m.stopLocked(true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("etcdtest: Wipe: stop: %v", err)
	}
	token := fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), clusterSeq.Add(1))
	for _, m := range c.members {
		if err := os.RemoveAll(m.dir); err != nil {
			t.Fatalf("etcdtest: Wipe: remove %s: %v", m.dir, err)
		}
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			t.Fatalf("etcdtest: Wipe: %v", err)
		}
		m.token = token
	}
	if err := c.startMembers(time.Now().Add(startTimeout)); err != nil {
		t.Fatalf("etcdtest: Wipe: %v", err)
	}
}

// single returns the member of a single-member cluster, and fails the test
// for a larger one.
func (c *Cluster) single(t testing.TB, op string) *Member {
	t.Helper()
	if len(c.members) != 1 {
		t.Fatalf("etcdtest: %s supports single-member clusters only, not %d members", op, len(c.members))
	}
	return c.members[0]
}

// copyDir copies the directory tree src to dst, which must not exist.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.Mkdir(target, 0o700)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
