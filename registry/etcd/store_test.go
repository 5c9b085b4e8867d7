package etcd_test

import (
	"strings"
	"testing"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestStoreConformance(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	registrytest.RunStore(t, func(t *testing.T) registry.Store {
		s, err := etcd.NewStore(cli, fast("/store/"+strings.ReplaceAll(t.Name(), "/", "_"))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestOpenOwnsItsClient checks that a Store Open made closes its client,
// and that NewStore leaves the caller's open.
func TestOpenOwnsItsClient(t *testing.T) {
	c := etcdtest.Start(t)
	s, err := etcd.Open(etcd.ClientConfig(c.Endpoints()...), fast("/open")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Registrar().Register(t.Context(), registry.Instance{Name: "user", Addr: "127.0.0.1:9001"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Client().Ctx().Err() == nil {
		t.Error("the client Open made is still open after Close")
	}
	cli := c.Client(t)
	borrowed, err := etcd.NewStore(cli, fast("/open")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := borrowed.Close(); err != nil {
		t.Fatal(err)
	}
	if cli.Ctx().Err() != nil {
		t.Error("NewStore's Close closed the caller's client")
	}
	if _, err := etcd.Open(etcd.ClientConfig(c.Endpoints()...), etcd.WithTTL(-1)); err == nil {
		t.Error("Open with an invalid option succeeded")
	}
}
