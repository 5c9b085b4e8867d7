package legacy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// During a migration from go-zero, clients see one service "user": the
// servers already on Muster and those still published by go-zero (as
// "user.rpc"), each instance telling where it was found.
func ExampleNewMerged() {
	// A Registrar and a Discovery (registry/etcd) on an embedded etcd.
	r, err := examplekit.StartRegistry()
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	// A go-zero server's key, as go-zero writes it (under its lease).
	if _, err := r.Client.Put(ctx, "user.rpc/7587", "10.0.0.2:9000"); err != nil {
		log.Fatal(err)
	}
	// A server already on Muster.
	if err := r.Registrar.Register(ctx, registry.Instance{Name: "user", ID: "user-1", Addr: "10.0.0.1:9000"}); err != nil {
		log.Fatal(err)
	}

	gozero, err := legacy.NewGoZero(legacy.WithName("user", "user.rpc"))
	if err != nil {
		log.Fatal(err)
	}
	old, err := etcd.NewDiscovery(r.Client, etcd.WithLayout(gozero))
	if err != nil {
		log.Fatal(err)
	}
	defer old.Close()
	merged, err := legacy.NewMerged(r.Discovery, legacy.Source{Name: "go-zero", Discovery: old, Services: []string{"user"}})
	if err != nil {
		log.Fatal(err)
	}
	defer merged.Close()

	w, err := merged.Watch(ctx, "user")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for _, in := range examplekit.Loaded(w).Instances { // the first loaded snapshot
		fmt.Println(in.ID, in.Addr, "from", legacy.SourceOf(in))
	}
	// Output:
	// 7587 10.0.0.2:9000 from go-zero
	// user-1 10.0.0.1:9000 from muster
}
