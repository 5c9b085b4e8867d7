package etcd_test

import (
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

// Deregister drains a serving instance before it deletes it, and the
// Discovery records the departure as deliberate (Snapshot.Retired), so
// that clients release it at once; a deletion of an instance that was
// serving (a lease revoked) is not recorded, and a registered instance
// leaves the record.
func TestDeregisterRetiresTheInstance(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	d := newDiscovery(t, cli, disc("/p")...)
	ctx := ctxFor(t, 20*time.Second)
	w := registerAndWatch(t, ctx, r, d)
	if err := r.Register(ctx, instance("svc", "b", 9002)); err != nil {
		t.Fatal(err)
	}
	snap := registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b"))
	if snap.Retired == nil || len(snap.Retired) != 0 {
		t.Fatalf("Retired = %#v before any departure, want empty and not nil (the backend records departures)", snap.Retired)
	}

	key := registry.Key("/p", "svc", "a")
	events := cli.Watch(ctx, key, clientv3.WithRev(snap.Revision+1))
	if err := r.Deregister(ctx, "svc", "a"); err != nil {
		t.Fatal(err)
	}
	var seen []string
	timeout := time.After(10 * time.Second)
	for len(seen) < 2 && !slices.Contains(seen, "delete") {
		var resp clientv3.WatchResponse
		select {
		case resp = <-events:
		case <-timeout:
			t.Fatalf("within 10 s of the Deregister, the key saw %v", seen)
		}
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			switch ev.Type {
			case clientv3.EventTypeDelete:
				seen = append(seen, "delete")
			default:
				in, err := registry.Unmarshal(ev.Kv.Value)
				if err != nil {
					t.Fatal(err)
				}
				seen = append(seen, map[bool]string{true: "put draining", false: "put serving"}[in.Draining])
			}
		}
	}
	if !slices.Equal(seen, []string{"put draining", "delete"}) {
		t.Fatalf("Deregister wrote %v to the key, want it drained, then deleted", seen)
	}
	snap = registrytest.WaitFor(t, w, "a retired", func(s registry.Snapshot) bool {
		return slices.Contains(s.Retired, "a") && len(s.Instances) == 1
	})
	t.Logf("after the deregistration: instances %d, retired %v", len(snap.Instances), snap.Retired)

	// b's lease taken away (as etcd's revocation does): b leaves, not
	// retired; its registrar writes it again under a new lease.
	st := r.Status()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(st.Session)); err != nil {
		t.Fatal(err)
	}
	snap = registrytest.WaitFor(t, w, "b back under a new lease", func(s registry.Snapshot) bool {
		return len(s.Instances) == 1 && s.Revision > snap.Revision && r.Status().Session != st.Session
	})
	if slices.Contains(snap.Retired, "b") {
		t.Fatalf("Retired = %v after a revocation: b was serving, its deletion is not deliberate", snap.Retired)
	}

	// a registered again: no longer retired.
	if err := r.Register(ctx, instance("svc", "a", 9001)); err != nil {
		t.Fatal(err)
	}
	snap = registrytest.WaitFor(t, w, "a back", registrytest.HasIDs("a", "b"))
	if slices.Contains(snap.Retired, "a") {
		t.Fatalf("Retired = %v with a registered again, want a out of it", snap.Retired)
	}
}
