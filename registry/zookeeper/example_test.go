package zookeeper_test

import (
	"context"
	"fmt"
	"log"

	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

// A Registrar and a Discovery on a ZooKeeper ensemble, as on etcd: the
// instance is an ephemeral node of the registrar's session, and leaves
// when the Registrar closes (or the process dies, after the session
// timeout). It needs a ZooKeeper server on 127.0.0.1:2181, so it is
// compiled but not run.
func Example() {
	servers := []string{"127.0.0.1:2181"}
	reg, err := zookeeper.NewRegistrar(servers)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	ctx := context.Background()
	in := registry.Instance{Name: "greeter", ID: "greeter-1", Addr: "10.0.0.1:9000"}
	if err := reg.Register(ctx, in); err != nil {
		log.Fatal(err)
	}

	disc, err := zookeeper.NewDiscovery(servers)
	if err != nil {
		log.Fatal(err)
	}
	defer disc.Close()
	w, err := disc.Watch(ctx, "greeter")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for _, in := range examplekit.Loaded(w).Instances { // the first loaded snapshot
		fmt.Println(in.ID, in.Addr)
	}
}
