package kratos_test

import (
	"context"
	"testing"
	"time"

	kratosapp "github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"

	"github.com/musterhq/muster/contrib/kratos"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry/etcd"
)

// TestKratosAppWithMusterRegistry runs a Kratos app (its own gRPC server
// and app lifecycle) with Muster as its registry, calls it from a Kratos
// client discovering through Muster, and sees it leave when it stops.
func TestKratosAppWithMusterRegistry(t *testing.T) {
	log.SetLogger(log.NewStdLogger(discard{}))
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := etcd.NewDiscovery(cli, etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reg := kratos.New(r, d)

	srv := kgrpc.NewServer(kgrpc.Address("127.0.0.1:0"))
	endpoint, err := srv.Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	app := kratosapp.New(kratosapp.ID("k1"), kratosapp.Name("greeter"), kratosapp.Version("v1"),
		kratosapp.Server(srv), kratosapp.Registrar(reg)) // the one line that picks the registry
	ran := make(chan error, 1)
	go func() { ran <- app.Run() }()

	conn, err := kgrpc.DialInsecure(ctx, kgrpc.WithEndpoint("discovery:///greeter"), kgrpc.WithDiscovery(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testbackend.CallUntil(t, conn, 10*time.Second, "the Kratos app called through Muster", testbackend.HasAll(endpoint.Host))

	w, err := d.Watch(ctx, "greeter")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := registrytest.WaitFor(t, w, "the Kratos app registered", registrytest.HasIDs("k1"))
	if got := s.Instances[0]; got.Version != "v1" || got.Addr != endpoint.Host {
		t.Fatalf("registered %+v, want version v1 at %s", *got, endpoint.Host)
	}
	if err := app.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the Kratos app did not stop")
	}
	registrytest.WaitFor(t, w, "the Kratos app deregistered on stop", registrytest.HasIDs())
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
