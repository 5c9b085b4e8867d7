package clusters_test

import (
	"context"
	"fmt"
	"log"

	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/clusters"
)

// Two regions, each with an etcd cluster of its own and a server
// registered there under the same ID: a client reading both sees two
// instances, each with its cluster and, as they set none, its cluster's
// region.
func ExampleNew() {
	eu, err := examplekit.StartRegistry() // a Registrar and a Discovery on an embedded etcd
	if err != nil {
		log.Fatal(err)
	}
	defer eu.Close()
	us, err := examplekit.StartRegistry()
	if err != nil {
		log.Fatal(err)
	}
	defer us.Close()
	ctx := context.Background()
	// Each server registers in its own region's cluster only.
	if err := eu.Registrar.Register(ctx, registry.Instance{Name: "user", ID: "user-1", Addr: "10.0.0.1:9000"}); err != nil {
		log.Fatal(err)
	}
	if err := us.Registrar.Register(ctx, registry.Instance{Name: "user", ID: "user-1", Addr: "10.1.0.1:9000"}); err != nil {
		log.Fatal(err)
	}

	d, err := clusters.New(
		clusters.Cluster{Name: "eu", Region: "eu-1", Discovery: eu.Discovery},
		clusters.Cluster{Name: "us", Region: "us-1", Discovery: us.Discovery},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	w, err := d.Watch(ctx, "user")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	s := w.Snapshot()
	for !s.Clusters[0].Loaded || !s.Clusters[1].Loaded { // until both clusters answered
		<-w.Updates()
		s = w.Snapshot()
	}
	for _, in := range s.Instances {
		fmt.Println(in.ID, in.Addr, registry.ClusterOf(in), in.Region)
	}
	// Output:
	// user-1 10.0.0.1:9000 eu eu-1
	// user-1 10.1.0.1:9000 us us-1
}
