package zookeeper_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

func TestStoreConformance(t *testing.T) {
	c := zktest.Start(t)
	registrytest.RunStore(t, func(t *testing.T) registry.Store {
		s, err := zookeeper.Open(c.Addrs(), fast("/store/"+strings.ReplaceAll(t.Name(), "/", "_"))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestStoreSaysWhatItLacks checks that ZooKeeper's Admin has neither a
// journal nor the removal of another process's instance, by its type.
func TestStoreSaysWhatItLacks(t *testing.T) {
	c := zktest.Start(t)
	s, err := zookeeper.Open(c.Addrs(), fast("/lacks")...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin := s.Admin(registry.Actor{})
	if _, ok := admin.(registry.HistoryReader); ok {
		t.Error("ZooKeeper's Admin claims a journal (registry.HistoryReader)")
	}
	if _, ok := admin.(registry.InstanceRemover); ok {
		t.Error("ZooKeeper's Admin claims to remove instances (registry.InstanceRemover)")
	}
	err = admin.SetOverride(context.Background(), "user", "none", registry.Override{})
	if !errors.Is(err, registry.ErrNoInstance) || !errors.Is(err, zookeeper.ErrNoInstance) {
		t.Errorf("SetOverride of no instance: %v; want registry.ErrNoInstance and zookeeper.ErrNoInstance", err)
	}
}
