package kratos_test

import (
	"context"
	"fmt"
	"log"

	kratosregistry "github.com/go-kratos/kratos/v2/registry"

	"github.com/musterhq/muster/contrib/kratos"
	"github.com/musterhq/muster/internal/testkit/exampleetcd"
	"github.com/musterhq/muster/registry/etcd"
)

// A Kratos app on Muster's registry: the Registry is both the app's
// registrar (kratos.Registrar(r) on the server) and its discovery
// (grpc.WithDiscovery(r) on the client). An instance is registered under
// the address of its grpc:// endpoint.
func ExampleNew() {
	// A client of an embedded etcd; a program takes
	// clientv3.New(etcd.ClientConfig("http://etcd-0:2379", ...)).
	cli, stop, err := exampleetcd.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	registrar, err := etcd.NewRegistrar(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer registrar.Close()
	discovery, err := etcd.NewDiscovery(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer discovery.Close()
	r := kratos.New(registrar, discovery)

	ctx := context.Background()
	si := &kratosregistry.ServiceInstance{ID: "greeter-1", Name: "greeter", Version: "v1.4.2",
		Endpoints: []string{"http://10.0.0.1:8000", "grpc://10.0.0.1:9000"}}
	if err := r.Register(ctx, si); err != nil {
		log.Fatal(err)
	}
	found, err := r.GetService(ctx, "greeter")
	if err != nil {
		log.Fatal(err)
	}
	for _, si := range found {
		fmt.Println(si.ID, si.Version, si.Endpoints)
	}
	// Output: greeter-1 v1.4.2 [grpc://10.0.0.1:9000?isSecure=false]
}
