package kratos_test

import (
	"context"
	"testing"

	kratosregistry "github.com/go-kratos/kratos/v2/registry"

	"github.com/musterhq/muster/contrib/kratos"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry/etcd"
)

func TestRegisterNeedsAGRPCEndpoint(t *testing.T) {
	c := etcdtest.Start(t)
	r, err := etcd.NewRegistrar(c.Client(t), etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	reg := kratos.New(r, nil)
	si := &kratosregistry.ServiceInstance{ID: "k1", Name: "greeter", Endpoints: []string{"http://127.0.0.1:8000"}}
	if err := reg.Register(context.Background(), si); err == nil {
		t.Fatal("an instance without a grpc:// endpoint: want an error")
	}
	if _, err := reg.Watch(context.Background(), "greeter"); err == nil {
		t.Fatal("Watch without a Discovery: want an error")
	}
	if err := kratos.New(nil, nil).Register(context.Background(), si); err == nil {
		t.Fatal("Register without a Registrar: want an error")
	}
}
