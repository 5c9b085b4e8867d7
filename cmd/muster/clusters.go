package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/clusters"
	"github.com/musterhq/muster/registry/etcd"
)

// clusterSpec is one --cluster NAME=ENDPOINTS.
type clusterSpec struct {
	name      string
	endpoints []string
}

// clusterFlags holds the --cluster values of a command.
type clusterFlags struct {
	values []string
}

func (f *clusterFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.values, "cluster", nil,
		"an independent etcd cluster read beside the others, as NAME=ENDPOINTS (endpoints comma-separated; repeatable): "+
			"the union is shown with a CLUSTER column; --endpoints is then not read, and the TLS and auth flags apply to every cluster")
}

// parse checks the --cluster values: each NAME=ENDPOINTS, with a valid
// name used once and endpoints that parse. The error names the value.
func (f *clusterFlags) parse() ([]clusterSpec, error) {
	specs := make([]clusterSpec, 0, len(f.values))
	seen := map[string]bool{}
	for _, v := range f.values {
		name, eps, ok := strings.Cut(v, "=")
		if !ok {
			return nil, usageErrorf("--cluster %q: want NAME=ENDPOINTS, such as eu=http://10.0.0.1:2379", v)
		}
		if err := clusters.ValidateName(name); err != nil {
			return nil, usageErrorf("--cluster %q: %v", v, err)
		}
		if seen[name] {
			return nil, usageErrorf("--cluster %q: the name %q is used twice", v, name)
		}
		seen[name] = true
		spec := clusterSpec{name: name}
		for _, ep := range strings.Split(eps, ",") {
			if strings.TrimSpace(ep) == "" {
				continue
			}
			u, err := parseEndpoint("--cluster "+name, ep)
			if err != nil {
				return nil, err
			}
			spec.endpoints = append(spec.endpoints, u)
		}
		if len(spec.endpoints) == 0 {
			return nil, usageErrorf("--cluster %q: no endpoints; want NAME=ENDPOINTS", v)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// connectClusters creates a session that reads services through a
// Discovery over the clusters in specs, each with an etcd client and a
// Discovery of its own (the TLS and auth flags apply to each). It has no
// client of its own: settings (overrides, canaries, policies) are per
// cluster and not read. Like connect, a client without credentials does
// not contact etcd; a cluster that does not answer does not fail it.
func (g *globalOptions) connectClusters(stderr io.Writer, specs []clusterSpec, opts ...etcd.Option) (*session, error) {
	s := &session{g: g}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s.opts = append([]etcd.Option{etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout), etcd.WithLogger(log)}, opts...)
	members := make([]clusters.Cluster, 0, len(specs))
	for _, spec := range specs {
		cfg, err := g.clientConfig()
		if err != nil {
			return nil, err
		}
		cfg.Endpoints = spec.endpoints
		cli, err := clientv3.New(cfg)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("cluster %s: etcd client for %s: %w", spec.name, strings.Join(spec.endpoints, ","), err)
		}
		s.closers = append(s.closers, cli.Close)
		d, err := etcd.NewDiscovery(cli, s.opts...)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.closers = append(s.closers, d.Close)
		members = append(members, clusters.Cluster{Name: spec.name, Discovery: d})
	}
	u, err := clusters.New(members...)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.closers = append(s.closers, u.Close)
	s.view = u
	return s, nil
}

// waitClusters waits until every cluster's part of w's snapshot is
// loaded or ctx ends, and returns the snapshot. A cluster that did not
// answer is named on stderr (its instances are not listed); it is an
// error only when no cluster answered.
func waitClusters(ctx context.Context, w registry.Watcher, stderr io.Writer) (registry.Snapshot, error) {
	for {
		s := w.Snapshot()
		if s.Clusters != nil && !slices.ContainsFunc(s.Clusters, func(c registry.ClusterSnapshot) bool { return !c.Loaded }) {
			return s, nil
		}
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return s, registry.ErrClosed
			}
			continue
		case <-ctx.Done():
		}
		s = w.Snapshot()
		var errs []error
		for _, c := range s.Clusters {
			if c.Loaded {
				continue
			}
			why := c.Err
			if why == nil {
				why = ctx.Err()
			}
			errs = append(errs, fmt.Errorf("cluster %s: %w", c.Cluster, why))
			fmt.Fprintf(stderr, "muster: cluster %s did not answer (its instances are not listed): %v\n", c.Cluster, why)
		}
		if !s.Loaded {
			return s, errors.Join(errs...)
		}
		return s, nil
	}
}

// hasClusters reports whether any of ins came from a Discovery over
// several clusters.
func hasClusters(ins []*registry.Instance) bool {
	return slices.ContainsFunc(ins, func(in *registry.Instance) bool { return registry.ClusterOf(in) != "" })
}

// runLsClusters is ls over several clusters (--cluster): the union of
// service's instances with a CLUSTER column, or every service with its
// instances per cluster.
func runLsClusters(ctx context.Context, g *globalOptions, specs []clusterSpec, output, service string, stdout, stderr io.Writer) error {
	s, err := g.connectClusters(stderr, specs)
	if err != nil {
		return err
	}
	defer s.Close()
	tctx, cancel := context.WithTimeout(ctx, g.timeout+reportGrace)
	defer cancel()
	names := []string{service}
	if service == "" {
		if names, err = s.view.Services(tctx); err != nil {
			return fmt.Errorf("list services under %s: %w", g.prefix, err)
		}
	}
	watchers := make([]registry.Watcher, len(names))
	for i, name := range names {
		if watchers[i], err = s.view.Watch(tctx, name); err != nil {
			return err
		}
	}
	rows := make([]serviceRow, len(names))
	var snap registry.Snapshot
	for i, w := range watchers {
		if snap, err = waitClusters(tctx, w, stderr); err != nil {
			return fmt.Errorf("read service %s: %w", names[i], err)
		}
		rows[i] = serviceRow{Name: names[i], Instances: len(snap.Instances), Clusters: map[string]int{}}
		for _, c := range snap.Clusters {
			rows[i].Clusters[c.Cluster] = len(c.Instances)
		}
	}
	if service != "" {
		return writeInstances(stdout, stderr, output, service, snap.Instances, nil, nil)
	}
	if output == outputJSON {
		return writeJSON(stdout, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(stderr, "no services under %s\n", g.prefix)
		return err
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "SERVICE\tINSTANCES\tCLUSTERS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Name, r.Instances, clustersCell(r.Clusters))
	}
	return tw.Flush()
}

// clustersCell renders instances per cluster as "eu:2,us:1", by name.
func clustersCell(counts map[string]int) string {
	parts := make([]string, 0, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s:%d", name, counts[name]))
	}
	return strings.Join(parts, ",")
}
