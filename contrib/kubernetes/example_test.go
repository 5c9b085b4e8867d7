package kubernetes_test

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/musterhq/muster/contrib/kubernetes"
	"github.com/musterhq/muster/registry"
)

// A Discovery over a cluster's EndpointSlices (here client-go's fake
// clientset; in a cluster, a clientset from rest.InClusterConfig). Pass it
// to resolver.NewBuilder to dial "muster:///greeter.default".
func ExampleNewDiscovery() {
	cs := fake.NewClientset(
		slice("greeter-abc", "greeter", 9000, ep("10.0.0.1", "greeter-0", "eu-1a", isReady)),
		slice("greeter-def", "greeter", 9000, ep("10.0.0.2", "greeter-1", "eu-1b", isTerminating)),
	)
	d, err := kubernetes.NewDiscovery(cs, kubernetes.WithPort("grpc"))
	if err != nil {
		panic(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := d.Watch(ctx, "greeter.default")
	if err != nil {
		panic(err)
	}
	var s registry.Snapshot
	for s = w.Snapshot(); !s.Loaded; s = w.Snapshot() {
		if _, open := <-w.Updates(); !open {
			fmt.Println("not loaded in time")
			return
		}
	}
	for _, in := range s.Instances {
		fmt.Println(in.ID, in.Addr, in.Zone, "weight", in.EffectiveWeight())
	}
	// Output:
	// greeter-0 10.0.0.1:9000 eu-1a weight 100
	// greeter-1 10.0.0.2:9000 eu-1b weight 0
}
