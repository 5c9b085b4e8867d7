package etcd_test

import (
	"context"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/exampleetcd"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// A server process registers its instance with a Registrar; a client
// process follows the service with a Discovery and sees it in the watch's
// snapshot. Closing the Registrar revokes its lease: the instance leaves.
func Example() {
	srv, err := exampleetcd.Start() // an embedded etcd; in production, your cluster's URLs
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(etcd.ClientConfig(srv.Endpoint()))
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
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
