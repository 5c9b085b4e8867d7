package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/server"
)

func TestWithMetricsAddrDeclaresTheMetricsListener(t *testing.T) {
	e := newEnv(t)
	md := map[string]string{"team": "core"}
	e.startInstance(t, registry.Instance{Name: "greeter", ID: "m1", Metadata: md}, nil, server.WithMetricsAddr(":9100"))
	if _, ok := md[promsd.MetadataKey]; ok {
		t.Error("WithMetricsAddr wrote into the caller's Metadata map")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := e.disc.Watch(ctx, "greeter")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for {
		if s := w.Snapshot(); len(s.Instances) == 1 {
			in := s.Instances[0]
			if in.Metadata[promsd.MetadataKey] != ":9100" || in.Metadata["team"] != "core" {
				t.Fatalf("registered metadata %v, want metrics=:9100 beside team=core", in.Metadata)
			}
			target, ok, err := promsd.MetricsTarget(in)
			if !ok || err != nil || !strings.HasSuffix(target, ":9100") || !strings.HasPrefix(in.Addr, strings.TrimSuffix(target, "9100")) {
				t.Fatalf("MetricsTarget = %q, %v, %v for Addr %s", target, ok, err, in.Addr)
			}
			return
		}
		select {
		case <-w.Updates():
		case <-ctx.Done():
			t.Fatalf("instance not registered within 10s: %+v", w.Snapshot())
		}
	}
}

func TestWithMetricsAddrRejectsABadAddress(t *testing.T) {
	e := newEnv(t)
	reg, err := etcd.NewRegistrar(e.cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for _, bad := range []string{"9100", ":0", "a b:1"} {
		_, err := server.New(reg, registry.Instance{Name: "greeter"}, server.WithMetricsAddr(bad))
		if err == nil || !strings.Contains(err.Error(), "WithMetricsAddr") || !strings.Contains(err.Error(), bad) {
			t.Errorf("WithMetricsAddr(%q): New error %v, want one naming the option and the address", bad, err)
		}
	}
}
