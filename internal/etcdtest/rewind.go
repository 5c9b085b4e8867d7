package etcdtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Faults that rewind the store's history, as operators produce them: a
// member restarted with an empty data directory (a new cluster on the same
// endpoints) and a data directory restored from a copy.

// Wipe stops the only member of a one-member cluster, deletes its data and
// starts it again on the same ports as a new cluster: the store is empty,
// revisions start again at 1, and the cluster ID is different (the
// cluster token is new). Clients keep their endpoints. It fails the test
// for a cluster of more than one member, or if the member does not serve
// within 15 seconds.
func (c *Cluster) Wipe(t testing.TB) {
	t.Helper()
	if len(c.members) != 1 {
		t.Fatalf("etcdtest: Wipe: only a one-member cluster can be wiped (this one has %d)", len(c.members))
	}
	if err := c.members[0].wipe(); err != nil {
		t.Fatalf("etcdtest: Wipe: %v", err)
	}
}

func (m *Member) wipe() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.retired {
		return errors.New("the cluster is closed")
	}
	if err := m.stopLocked(true); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(m.dir, "member")); err != nil {
		return fmt.Errorf("delete the data of %s: %w", m.name, err)
	}
	m.token = fmt.Sprintf("%s-wiped-%d", m.token, clusterSeq.Add(1))
	return m.launchLocked("new")
}

// CopyData copies the data directory of a stopped member to a new
// temporary directory and returns it, for RestoreData. It fails the test if
// the member is running.
func (m *Member) CopyData(t testing.TB) string {
	t.Helper()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.Running() {
		t.Fatalf("etcdtest: CopyData %s: member is running; Stop it first", m.name)
	}
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(m.dir)); err != nil {
		t.Fatalf("etcdtest: CopyData %s: %v", m.name, err)
	}
	return dst
}

// RestoreData replaces the data directory of a stopped member with a copy
// made by CopyData, as restoring a backup of the disk would; Restart then
// starts the member from that older state. It fails the test if the member
// is running.
func (m *Member) RestoreData(t testing.TB, from string) {
	t.Helper()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.Running() {
		t.Fatalf("etcdtest: RestoreData %s: member is running; Stop it first", m.name)
	}
	if err := os.RemoveAll(filepath.Join(m.dir, "member")); err != nil {
		t.Fatalf("etcdtest: RestoreData %s: %v", m.name, err)
	}
	if err := os.CopyFS(m.dir, os.DirFS(from)); err != nil {
		t.Fatalf("etcdtest: RestoreData %s: %v", m.name, err)
	}
}

// launchLocked starts the member's server in the given initial cluster
// state and waits until it serves a linearizable read. m.opMu must be held.
func (m *Member) launchLocked(state string) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		e, abort, err := m.launch(state)
		if err == nil {
			m.setEtcd(e, abort)
			break
		}
		if !isAddrInUse(err) || time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
	err := waitReady(m.Etcd(), deadline)
	if err == nil {
		err = waitServing(m.Etcd(), deadline)
	}
	if err != nil {
		if serr := m.stopLocked(true); serr != nil {
			err = fmt.Errorf("%w (and stopping it again failed: %v)", err, serr)
		}
		return err
	}
	return nil
}
