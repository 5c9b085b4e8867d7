package reliability_test

import (
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

// Fault: a member frozen (SIGSTOP) for three TTLs. It holds its
// connections open and answers nothing, so the lease keepalive streams on
// it stall without closing. Each member is frozen in turn, so whichever
// members carry the registrars' keepalives are frozen in some round.
// Checked every 100 ms through another member: every registered key is in
// etcd with the lease its registrar keeps alive, and the channel following
// the service never loses a live instance.
//
// One loss is etcd's own: a member that led the cluster when it was frozen
// revokes, on resuming, the leases it believes expired (its check that it
// still leads is skipped when its raft loop has just ticked, which it has
// after a SIGCONT), and the revocation is sometimes committed by the new
// leader. A key is then gone while its registrar still renews its lease.
// The test accepts that loss only as Muster meets it: the registrar saw a
// revocation (its lease ended with TTL left, Status().Revocations), and its
// keys are back under a new lease within revokedRepair.
//
// A key may also move to a new lease without leaving etcd: a registrar
// that got no renewal answered within the TTL (while the cluster elects a
// leader after its leader froze, renewals fail, though etcd's new leader
// extends every lease) takes its lease as lost and puts its keys again
// under a new one, over themselves. The key's creation revision tells
// that move from a loss: it is unchanged only if the key was never gone.
func TestFrozenMemberCostsNoRegistration(t *testing.T) {
	const revokedRepair = 3 * time.Second
	w := newWorld(t, etcdtest.WithProcesses())
	ids := []string{"a", "b", "c", "d"}
	leases := map[string]int64{}
	owners := map[string]*backend{}
	for _, id := range ids {
		owners[key(id)] = w.startBackend(t, id)
	}
	var (
		mu     sync.Mutex
		states []int
	)
	conn := dialRecording(t, w.b, "round_robin", func(n int) {
		mu.Lock()
		states = append(states, n)
		mu.Unlock()
	})
	conn.Connect()
	within(t, 10*time.Second, "the channel holding all four instances", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(states) > 0 && states[len(states)-1] == len(ids)
	})
	created := map[string]int64{}
	for k, e := range entriesOf(t, w.cli) {
		leases[k], created[k] = e.lease, e.created
	}
	if len(leases) != len(ids) {
		t.Fatalf("keys %v, want %d", leases, len(ids))
	}
	mu.Lock()
	seen := len(states)
	mu.Unlock()

	revocations, moves := 0, 0
	// follow checks the keys through check every 100 ms for d, while
	// stage names what is being done to the cluster; it returns the
	// number of checks.
	follow := func(stage string, check *clientv3.Client, d time.Duration) int {
		start := time.Now()
		checks := 0
		for time.Since(start) < d {
			entries := entriesOf(t, check)
			for k, l := range leases {
				if entries[k].lease == l {
					continue
				}
				if e, ok := entries[k]; ok && e.created == created[k] && owners[k].reg.Status().Session == e.lease {
					// Put again over itself under its registrar's new
					// lease: never gone (see above).
					t.Logf("%s, %s in: %s moved from lease %x to %x without leaving etcd (registrar status %+v)",
						stage, fmtDur(time.Since(start)), k, l, e.lease, owners[k].reg.Status())
					leases[k] = e.lease
					moves++
					continue
				}
				// Gone or bound to another lease: only etcd revoking the
				// lease (see above) may do that, and the registrar must
				// then put the key back under a new lease at once.
				owner := owners[k].reg
				missing := time.Since(start)
				var now keyEntry
				took := within(t, revokedRepair, "the key of "+k+" back under a new lease", func() bool {
					now = entriesOf(t, check)[k]
					return now.lease != 0 && now.lease != l && owner.Status().Session == now.lease
				})
				if st := owner.Status(); st.Revocations == 0 {
					t.Fatalf("%s, %s in: key %s had lease %x, want %x, and its registrar saw no revocation: the lease expired (keys %v, status %+v)",
						stage, fmtDur(missing), k, entries[k].lease, l, entries, st)
				}
				t.Logf("%s, %s in: etcd revoked the lease of %s (%x); back under lease %x within %s of being seen missing",
					stage, fmtDur(missing), k, l, now.lease, fmtDur(took))
				leases[k], created[k] = now.lease, now.created
				revocations++
			}
			checks++
			time.Sleep(100 * time.Millisecond) // sampling etcd's state; no event to await
		}
		return checks
	}
	members := w.c.Members()
	for i, m := range members {
		other := members[(i+1)%len(members)]
		m.Freeze(t)
		stage := m.Name() + " frozen"
		checks := follow(stage, w.c.Client(t, other.DirectEndpoint()), 3*ttl)
		m.Thaw(t)
		t.Logf("%s for %s: %d checks", stage, fmtDur(3*ttl), checks)
	}
	// A member thawed revokes what it believes expired at once: one more
	// TTL with every member up covers the last one.
	checks := follow(members[len(members)-1].Name()+" thawed", w.c.Client(t, members[0].DirectEndpoint()), ttl)
	t.Logf("every member up for %s: %d checks; %d leases revoked by etcd and repaired, %d keys moved to a new lease without leaving etcd",
		fmtDur(ttl), checks, revocations, moves)
	mu.Lock()
	defer mu.Unlock()
	for _, n := range states[seen-1:] {
		if n != len(ids) && revocations == 0 {
			t.Fatalf("the channel was handed %d endpoints after the faults started (states %v), want %d every time", n, states[seen-1:], len(ids))
		}
	}
	if last := states[len(states)-1]; last != len(ids) {
		t.Fatalf("the channel holds %d endpoints at the end (states %v), want %d", last, states[seen-1:], len(ids))
	}
	if revocations > 0 {
		t.Logf("etcd revoked %d live leases; the channel's states after the faults started: %v", revocations, states[seen-1:])
	}
}
