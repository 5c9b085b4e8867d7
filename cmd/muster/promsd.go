package main

import (
	"fmt"
	"log/slog"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry/clusters"
	"github.com/musterhq/muster/registry/etcd"
)

// prometheusSDPath is where serve and console answer Prometheus's HTTP
// service discovery (docs/PROMETHEUS.md).
const prometheusSDPath = "/prometheus/sd"

// startPrometheusSD follows every service of the registry cfg reaches under
// prefix and returns the route of its HTTP service discovery, the
// Discovery it follows them by (whose state /readyz reports), and the
// function that stops it (to call before etcd stops).
func startPrometheusSD(cfg clientv3.Config, prefix string, log *slog.Logger) (route, *health.Listing, func(), error) {
	log = log.With("component", "muster.promsd")
	cli, err := clientv3.New(cfg)
	if err != nil {
		return route{}, nil, nil, fmt.Errorf("prometheus sd: etcd client: %w", err)
	}
	d, err := etcd.NewDiscovery(cli, etcd.WithPrefix(prefix), etcd.WithLogger(log))
	if err != nil {
		cli.Close()
		return route{}, nil, nil, fmt.Errorf("prometheus sd: %w", err)
	}
	listing := health.NewListing(d)
	h, err := promsd.NewHandler(listing, promsd.WithLogger(log))
	if err != nil {
		_ = d.Close()
		cli.Close()
		return route{}, nil, nil, fmt.Errorf("prometheus sd: %w", err)
	}
	stop := sync.OnceFunc(func() {
		_ = h.Close()
		_ = d.Close()
		_ = cli.Close()
	})
	return route{pattern: "GET " + prometheusSDPath, handler: h}, listing, stop, nil
}

// startClustersPrometheusSD is startPrometheusSD over the union of the
// clusters cls (whose clients stay the caller's), as a console over them
// reads it.
func startClustersPrometheusSD(cls []console.Cluster, prefix string, log *slog.Logger) (route, *health.Listing, func(), error) {
	log = log.With("component", "muster.promsd")
	var closers []func() error
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	}
	members := make([]clusters.Cluster, 0, len(cls))
	for _, c := range cls {
		// openClusters opens etcd stores.
		d, err := etcd.NewDiscovery(c.Store.(*etcd.Store).Client(), etcd.WithPrefix(prefix), etcd.WithLogger(log))
		if err != nil {
			closeAll()
			return route{}, nil, nil, fmt.Errorf("prometheus sd: cluster %s: %w", c.Name, err)
		}
		closers = append(closers, d.Close)
		members = append(members, clusters.Cluster{Name: c.Name, Region: c.Region, Discovery: d})
	}
	u, err := clusters.New(members...)
	if err != nil {
		closeAll()
		return route{}, nil, nil, fmt.Errorf("prometheus sd: %w", err)
	}
	closers = append(closers, u.Close)
	listing := health.NewListing(u)
	h, err := promsd.NewHandler(listing, promsd.WithLogger(log))
	if err != nil {
		closeAll()
		return route{}, nil, nil, fmt.Errorf("prometheus sd: %w", err)
	}
	closers = append(closers, h.Close)
	return route{pattern: "GET " + prometheusSDPath, handler: h}, listing, sync.OnceFunc(closeAll), nil
}
