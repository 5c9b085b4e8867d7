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

// An operator's writes are traced: History lists who changed what, from
// where, with the value before and after, newest first.
func ExampleHistory() {
	cli, stop, err := examplekit.EtcdClient()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	by := []etcd.WriteOption{etcd.WithBy("alice"), etcd.WithSource("runbook")}
	if err := etcd.SetCanary(ctx, cli, "greeter", registry.Canary{Color: "blue", Percent: 5}, by...); err != nil {
		log.Fatal(err)
	}
	if err := etcd.SetCanary(ctx, cli, "greeter", registry.Canary{Color: "blue", Percent: 50}, by...); err != nil {
		log.Fatal(err)
	}
	recs, err := etcd.History(ctx, cli, "greeter", 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		before, after := r.Describe()
		fmt.Printf("%d %s (%s) %s: %s -> %s\n", r.Seq, r.Who, r.Source, r.Action, before, after)
	}
	// Output:
	// 1 alice (runbook) canary: blue 5% -> blue 50%
	// 0 alice (runbook) canary: - -> blue 5%
}
