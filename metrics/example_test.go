package metrics_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/internal/testkit/exampleetcd"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// A process registers the collectors of its registrar, its discovery and
// its resolver, and serves them with
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}). Each is read when
// Prometheus scrapes.
func Example() {
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.Registrar(registrar, prometheus.Labels{"app": "greeter"}),
		metrics.Discovery(discovery, nil),
		metrics.Resolver(resolver.NewBuilder(discovery), nil),
	)
	in := registry.Instance{Name: "greeter", ID: "greeter-1", Addr: "10.0.0.1:9000"}
	if err := registrar.Register(context.Background(), in); err != nil {
		log.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "muster_registrar_registered", "muster_registrar_instances", "muster_discovery_watchers":
			m := f.GetMetric()[0]
			labels := ""
			for _, l := range m.GetLabel() {
				labels += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
			}
			fmt.Printf("%s{%s} %v\n", f.GetName(), labels, m.GetGauge().GetValue())
		}
	}
	// Output:
	// muster_discovery_watchers{} 0
	// muster_registrar_instances{app="greeter"} 1
	// muster_registrar_registered{app="greeter"} 1
}
