package metrics_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// A process registers the collectors of its registrar, its discovery and
// its resolver, and serves them with
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}). Each is read when
// Prometheus scrapes.
func Example() {
	// A Registrar and a Discovery (registry/etcd) on an embedded etcd.
	r, err := examplekit.StartRegistry()
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.Registrar(r.Registrar, prometheus.Labels{"app": "greeter"}),
		metrics.Discovery(r.Discovery, nil),
		metrics.Resolver(resolver.NewBuilder(r.Discovery), nil),
	)
	in := registry.Instance{Name: "greeter", ID: "greeter-1", Addr: "10.0.0.1:9000"}
	if err := r.Registrar.Register(context.Background(), in); err != nil {
		log.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "muster_registrar_registered", "muster_registrar_instances", "muster_discovery_watchers":
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output:
	// muster_discovery_watchers 0
	// muster_registrar_instances 1
	// muster_registrar_registered 1
}
