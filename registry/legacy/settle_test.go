package legacy_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// A server registered and deregistered with dual write (etcd.WithMirror)
// is seen through a merged Discovery as one arrival from Muster's registry
// and one departure: never as its go-zero copy, which the same
// transactions write and delete, and which a merge of the two watches
// would otherwise show on its own for a moment (an operator following
// `muster watch --legacy` read the server coming back undrained).
func TestMergedShowsADualWriteAsOneChange(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 60*time.Second)
	g, _, _ := mustLayouts(t, legacy.WithName("user", "user.rpc"))
	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar(etcd.WithMirror(g))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	m, err := legacy.NewMerged(newPrimary(t, cli), legacy.Source{Name: "go-zero", Discovery: newDiscovery(t, cli, g)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	w := watch(t, ctx, m, "user")
	rec := watch(t, ctx, m, "user") // read by the recorder alone

	// Every state the merge publishes, as "source weight" of the address
	// followed ("" while absent), in order.
	const addr = "127.0.0.1:9001"
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range rec.Updates() {
			state := ""
			for _, in := range rec.Snapshot().Instances {
				if in.Addr == addr {
					state = fmt.Sprintf("%s %d", legacy.SourceOf(in), in.EffectiveWeight())
				}
			}
			mu.Lock()
			if len(seen) == 0 || seen[len(seen)-1] != state {
				seen = append(seen, state)
			}
			mu.Unlock()
		}
	}()

	for round := range 3 {
		in := registry.Instance{Name: "user", ID: "u1", Addr: addr}
		if err := r.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
		registrytest.WaitFor(t, w, "registered", registrytest.HasIDs("u1"))
		if err := r.Deregister(ctx, in.Name, in.ID); err != nil {
			t.Fatal(err)
		}
		registrytest.WaitFor(t, w, "deregistered", func(s registry.Snapshot) bool { return len(s.Instances) == 0 })
		// The settle time passes: a hold that outlived the transaction
		// would show the copy now.
		time.Sleep(1100 * time.Millisecond)
		if len(w.Snapshot().Instances) != 0 {
			t.Fatalf("round %d: %v after the deregistration settled", round, w.Snapshot().Instances)
		}
	}
	_ = rec.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if strings.HasPrefix(s, "go-zero") {
			t.Fatalf("the merge showed the go-zero copy on its own: states %q", seen)
		}
	}
	t.Logf("states: %q", seen)
}
