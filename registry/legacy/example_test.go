package legacy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/musterhq/muster/internal/testkit/exampleetcd"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// During a migration from go-zero, clients see one service "user": the
// servers already on Muster and those still published by go-zero (as
// "user.rpc"), each instance telling where it was found.
func ExampleNewMerged() {
	// A client of an embedded etcd; a program takes
	// clientv3.New(etcd.ClientConfig("http://etcd-0:2379", ...)).
	cli, stop, err := exampleetcd.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	// A go-zero server's key, as go-zero writes it (under its lease).
	if _, err := cli.Put(ctx, "user.rpc/7587", "10.0.0.2:9000"); err != nil {
		log.Fatal(err)
	}
	// A server already on Muster.
	reg, err := etcd.NewRegistrar(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	if err := reg.Register(ctx, registry.Instance{Name: "user", ID: "user-1", Addr: "10.0.0.1:9000"}); err != nil {
		log.Fatal(err)
	}

	gozero, err := legacy.NewGoZero(legacy.WithName("user", "user.rpc"))
	if err != nil {
		log.Fatal(err)
	}
	primary, err := etcd.NewDiscovery(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer primary.Close()
	old, err := etcd.NewDiscovery(cli, etcd.WithLayout(gozero))
	if err != nil {
		log.Fatal(err)
	}
	defer old.Close()
	merged, err := legacy.NewMerged(primary, legacy.Source{Name: "go-zero", Discovery: old, Services: []string{"user"}})
	if err != nil {
		log.Fatal(err)
	}
	defer merged.Close()

	w, err := merged.Watch(ctx, "user")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for !w.Snapshot().Loaded {
		<-w.Updates()
	}
	for _, in := range w.Snapshot().Instances {
		fmt.Println(in.ID, in.Addr, "from", legacy.SourceOf(in))
	}
	// Output:
	// 7587 10.0.0.2:9000 from go-zero
	// user-1 10.0.0.1:9000 from muster
}
