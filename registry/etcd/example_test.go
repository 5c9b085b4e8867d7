package etcd_test

import (
	"context"
	"fmt"
	"log"

	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// A server process registers its instance with a Registrar; a client
// process follows the service with a Discovery and sees it in the watch's
// snapshot. Closing the Registrar revokes its lease: the instance leaves.
func Example() {
	// A client of an embedded etcd; a program takes
	// clientv3.New(etcd.ClientConfig("http://etcd-0:2379", ...)).
	cli, stop, err := examplekit.EtcdClient()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()

	reg, err := etcd.NewRegistrar(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	in := registry.Instance{Name: "greeter", ID: "greeter-1", Addr: "10.0.0.1:9000", Zone: "eu-1a"}
	if err := reg.Register(ctx, in); err != nil {
		log.Fatal(err)
	}

	disc, err := etcd.NewDiscovery(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer disc.Close()
	w, err := disc.Watch(ctx, "greeter")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for !w.Snapshot().Loaded {
		<-w.Updates()
	}
	for _, in := range w.Snapshot().Instances {
		fmt.Println(in.ID, in.Addr, in.Zone, "weight", in.EffectiveWeight())
	}
	// Output: greeter-1 10.0.0.1:9000 eu-1a weight 100
}
