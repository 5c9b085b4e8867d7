package kratos_test

import (
	"context"
	"fmt"
	"log"

	kratosregistry "github.com/go-kratos/kratos/v2/registry"

	"github.com/musterhq/muster/contrib/kratos"
	"github.com/musterhq/muster/internal/testkit/examplekit"
)

// A Kratos app on Muster's registry: the Registry is both the app's
// registrar (kratos.Registrar(k) on the server) and its discovery
// (grpc.WithDiscovery(k) on the client). An instance is registered under
// the address of its grpc:// endpoint.
func ExampleNew() {
	// A Registrar and a Discovery (registry/etcd) on an embedded etcd.
	r, err := examplekit.StartRegistry()
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	k := kratos.New(r.Registrar, r.Discovery)

	ctx := context.Background()
	si := &kratosregistry.ServiceInstance{ID: "greeter-1", Name: "greeter", Version: "v1.4.2",
		Endpoints: []string{"http://10.0.0.1:8000", "grpc://10.0.0.1:9000"}}
	if err := k.Register(ctx, si); err != nil {
		log.Fatal(err)
	}
	found, err := k.GetService(ctx, "greeter")
	if err != nil {
		log.Fatal(err)
	}
	for _, si := range found {
		fmt.Println(si.ID, si.Version, si.Endpoints)
	}
	// Output: greeter-1 v1.4.2 [grpc://10.0.0.1:9000?isSecure=false]
}
