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

// clusterSpec is one --cluster NAME=ENDPOINTS[,KEY=VALUE...].
type clusterSpec struct {
	name      string
	endpoints []string
	// own are the cluster's own TLS and auth settings, by key
	// (clusterKeys), each replacing the flag of that name for this
	// cluster only; "" clears the flag's value.
	own map[string]string
}

// clusterKeys are the settings a --cluster value may give for its cluster
// alone, in the order they are applied: the TLS and login keys are named
// after the etcd flag each replaces (a user given here drops the flags'
// password, so that it comes from the value's password-file, the user's
// "name:password" or $MUSTER_PASSWORD); region is the cluster's region,
// set on its instances that set none (clusters.Cluster.Region).
var clusterKeys = []string{"cacert", "cert", "key", "user", "password-file", "region"}

// clusterFlags holds the --cluster values of a command.
type clusterFlags struct {
	values []string
}

func (f *clusterFlags) add(cmd *cobra.Command) {
	f.addNamed(cmd, "cluster")
}

// addNamed adds the flag as name (serve's console takes it as
// --console-cluster).
func (f *clusterFlags) addNamed(cmd *cobra.Command, name string) {
	cmd.Flags().StringArrayVar(&f.values, name, nil,
		"an independent etcd cluster read beside the others, as NAME=ENDPOINTS[,KEY=VALUE...] (endpoints comma-separated; repeatable): "+
			"the union is shown with a CLUSTER column; --endpoints is then not read, and the TLS and auth flags apply to every cluster "+
			"but where a cluster's own "+strings.Join(clusterKeys[:len(clusterKeys)-1], "=, ")+"= replaces them; region= sets the region of its instances that set none "+
			"(such as eu=https://10.0.0.1:2379,cacert=eu-ca.pem,user=root,password-file=eu.pw,region=eu-1)")
}

// parse checks the --cluster values: each NAME=ENDPOINTS[,KEY=VALUE...],
// with a valid name used once, endpoints that parse and known keys given
// once. The error names the value.
func (f *clusterFlags) parse() ([]clusterSpec, error) {
	specs := make([]clusterSpec, 0, len(f.values))
	seen := map[string]bool{}
	for _, v := range f.values {
		name, rest, ok := strings.Cut(v, "=")
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
		for _, part := range strings.Split(rest, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if key, val, ok := strings.Cut(part, "="); ok {
				if !slices.Contains(clusterKeys, key) {
					return nil, usageErrorf("--cluster %s: unknown key %q; want one of %s", name, key, strings.Join(clusterKeys, ", "))
				}
				if _, dup := spec.own[key]; dup {
					return nil, usageErrorf("--cluster %s: %s is given twice", name, key)
				}
				if spec.own == nil {
					spec.own = map[string]string{}
				}
				if key == "region" {
					if err := clusters.ValidateRegion(val); err != nil {
						return nil, usageErrorf("--cluster %s: %v", name, err)
					}
				}
				spec.own[key] = val
				continue
			}
			u, err := parseEndpoint("--cluster "+name, part)
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

// forCluster returns the etcd options of spec's cluster: g's, with the
// cluster's endpoints and its own keys in place of the flags of their
// names, checked as the flags are (cert and key together, TLS only with
// https:// endpoints, a password for a user). Its errors are usage errors
// naming the cluster.
func (g *globalOptions) forCluster(spec clusterSpec) (*globalOptions, error) {
	c := *g
	c.clustered = false
	c.endpoints = spec.endpoints
	if c.passwordFile != "" {
		// g's password was read from the file: read it again, so that
		// validateSecurity does not take it for a second password.
		c.password = ""
	}
	for _, key := range clusterKeys {
		v, ok := spec.own[key]
		if !ok {
			continue
		}
		switch key {
		case "cacert":
			c.cacert = v
		case "cert":
			c.cert = v
		case "key":
			c.key = v
		case "user":
			c.user, c.password, c.passwordFile = v, "", ""
		case "password-file":
			c.password, c.passwordFile = "", v
		}
	}
	if err := c.validateSecurity(); err != nil {
		return nil, usageErrorf("--cluster %s: %v", spec.name, err)
	}
	return &c, nil
}

// clusterClientConfig is the etcd client configuration of spec's cluster.
func (g *globalOptions) clusterClientConfig(spec clusterSpec) (clientv3.Config, error) {
	c, err := g.forCluster(spec)
	if err != nil {
		return clientv3.Config{}, err
	}
	cfg, err := c.clientConfig()
	if err != nil {
		return cfg, fmt.Errorf("cluster %s: %w", spec.name, err)
	}
	return cfg, nil
}

// connectClusters creates a session that reads services through a
// Discovery over the clusters in specs, each with an etcd client and a
// Discovery of its own (the TLS and auth flags apply to each, but where
// the cluster's value gives its own: forCluster). It has no
// client of its own: settings (overrides, canaries, policies) are per
// cluster and not read. Like connect, a client without credentials does
// not contact etcd; a cluster that does not answer does not fail it.
func (g *globalOptions) connectClusters(stderr io.Writer, specs []clusterSpec, opts ...etcd.DiscoveryOption) (*session, error) {
	s := &session{g: g}
	log := g.log.logger(stderr, slog.LevelError)
	s.opts = append([]etcd.DiscoveryOption{etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout), etcd.WithLogger(log)}, opts...)
	cs, err := g.clusterConfigs(specs)
	if err != nil {
		return nil, err
	}
	members := make([]clusters.Cluster, 0, len(cs))
	for _, spec := range cs {
		cli, err := clientv3.New(spec.cfg)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("cluster %s: etcd client for %s: %w", spec.name, strings.Join(spec.cfg.Endpoints, ","), err)
		}
		s.closers = append(s.closers, cli.Close)
		d, err := etcd.NewDiscovery(cli, s.opts...)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.closers = append(s.closers, d.Close)
		members = append(members, clusters.Cluster{Name: spec.name, Region: spec.region, Discovery: d})
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

// clusterTarget holds the --cluster and --in flags of a command that acts
// on one cluster's instance or setting (drain, undrain, weight,
// deregister, canary, policy): the clusters configured, as for ls, and the
// one acted on.
type clusterTarget struct {
	clusterFlags
	in string
}

func (t *clusterTarget) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&t.values, "cluster", nil,
		"the independent etcd clusters configured, as NAME=ENDPOINTS[,KEY=VALUE...] (repeatable, as for ls): "+
			"the command acts on one of them, the only one given or the one --in names; --endpoints is then not read")
	cmd.Flags().StringVar(&t.in, "in", "",
		"the cluster (a --cluster NAME) to act on, needed when several --cluster are given: "+
			"an instance ID is unique within a cluster only, and settings (drain, weight, canary, policy) are per cluster")
}

// resolve returns the etcd options of the cluster the command acts on:
// g without --cluster, else the cluster's (forCluster). Its errors are
// usage errors naming the flag.
func (t *clusterTarget) resolve(g *globalOptions) (*globalOptions, error) {
	specs, err := t.parse()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.name
	}
	switch {
	case len(specs) == 0 && t.in != "":
		return nil, usageErrorf("--in %s: names one of the --cluster values, and none is given", t.in)
	case len(specs) == 0:
		return g, nil
	case t.in == "" && len(specs) > 1:
		return nil, usageErrorf("%d clusters are given (%s): name the one to act on with --in", len(specs), strings.Join(names, ", "))
	}
	i := 0
	if t.in != "" {
		if i = slices.Index(names, t.in); i < 0 {
			return nil, usageErrorf("--in %s: no --cluster of that name; given: %s", t.in, strings.Join(names, ", "))
		}
	}
	c, err := g.forCluster(specs[i])
	if err != nil {
		return nil, err
	}
	c.clusterName = specs[i].name
	return c, nil
}
