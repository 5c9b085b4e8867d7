package served

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// readSnapshotFile returns the file the store holds for service s.
func readSnapshotFile(t *testing.T, st *snapshotStore) snapshotFile {
	t.Helper()
	data, err := os.ReadFile(st.path("s"))
	if err != nil {
		t.Fatal(err)
	}
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// The store writes every history the registry moves to: a new generation
// whatever its revision, and a lower revision of the same generation when
// the registry itself went back (a rewind it did not flag); it skips what
// the file holds already, and the list of a channel behind the others.
func TestSnapshotStoreFollowsRewinds(t *testing.T) {
	st := &snapshotStore{dir: t.TempDir(), written: map[string]savedList{}}
	t0 := time.Unix(1000, 0)
	var cur registry.Snapshot // the registry's latest snapshot
	latest := func() registry.Snapshot { return cur }
	step := 0
	save := func(gen uint64, rev int64, n int, what string, wantWritten bool) {
		t.Helper()
		step++
		cur = registry.Snapshot{Service: "s", Loaded: true, Generation: gen, Revision: rev, Instances: list(n)}
		before := readOrZero(t, st)
		if err := st.save("s", positionOf(cur), cur.Instances, t0.Add(time.Duration(step)*time.Second), latest); err != nil {
			t.Fatal(err)
		}
		f := readSnapshotFile(t, st)
		written := !f.SavedAt.Equal(before.SavedAt)
		if written != wantWritten {
			t.Fatalf("%s (generation %d, revision %d): written %v, want %v; file at generation %d, revision %d",
				what, gen, rev, written, wantWritten, f.Generation, f.Revision)
		}
		if written && (f.Generation != gen || f.Revision != rev || len(f.Instances) != n) {
			t.Fatalf("%s: file at generation %d, revision %d, %d instances; want %d, %d, %d",
				what, f.Generation, f.Revision, len(f.Instances), gen, rev, n)
		}
	}
	save(0, 18, 3, "first list", true)
	save(0, 18, 3, "the same revision again (another channel)", false)
	save(0, 20, 4, "a higher revision", true)
	save(0, 9, 2, "a lower revision the registry went back to (etcd restarted empty, no generation)", true)
	save(0, 10, 3, "the new history goes on", true)
	save(7, 10, 5, "another generation at the same revision", true)
	save(7, 10, 5, "the same again", false)
	save(8, 30, 5, "yet another generation", true)
	save(9, 2, 1, "another generation at a lower revision", true)
	save(10, 2, 1, "another generation at the same revision with the same list", true)

	// A channel behind the others: another channel wrote revision 5, the
	// registry's latest, or a later one; this channel still holds the list
	// of revision 4, and its next update brings the newer one. Writing 4
	// meanwhile would only go back.
	save(10, 5, 4, "the registry's revision 5", true)
	for _, latestRev := range []int64{5, 6} {
		cur.Revision = latestRev
		if err := st.save("s", position{gen: 10, rev: 4}, list(6), t0.Add(time.Hour), latest); err != nil {
			t.Fatal(err)
		}
		if f := readSnapshotFile(t, st); f.Revision != 5 {
			t.Fatalf("registry at %d: a channel behind the others wrote revision %d over revision 5", latestRev, f.Revision)
		}
	}
	cur.Revision = 5

	// An unflagged rewind that reaches the very revision the file holds
	// before its first save: same position, another list.
	save(10, 5, 2, "a rewind back to the revision of the file with another list", true)
}

func readOrZero(t *testing.T, st *snapshotStore) snapshotFile {
	t.Helper()
	if _, err := os.Stat(st.path("s")); os.IsNotExist(err) {
		return snapshotFile{}
	}
	return readSnapshotFile(t, st)
}

// Files written before the generation existed are read as before.
func TestSnapshotFileWithoutGeneration(t *testing.T) {
	dir := t.TempDir()
	old := `{"v":1,"service":"s","saved_at":"2026-11-01T10:00:00Z","revision":18,"instances":[` +
		`{"v":1,"id":"a","name":"s","addr":"10.0.0.1:9000","weight":100}]}`
	if err := os.WriteFile(filepath.Join(dir, "s.json"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	st := &snapshotStore{dir: dir, written: map[string]savedList{}}
	got, savedAt, err := st.load("s")
	if err != nil || len(got) != 1 || got[0].Addr != "10.0.0.1:9000" || savedAt.IsZero() {
		t.Fatalf("load of a file without generation = %v, %v, %v", got, savedAt, err)
	}
}
