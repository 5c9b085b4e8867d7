package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func newLsCmd(g *globalOptions) *cobra.Command {
	var output string
	var layout layoutFlags
	var cls clusterFlags
	cmd := &cobra.Command{
		Use:   "ls [service]",
		Short: "List services, or the instances of one service",
		Long: `Ls lists the services in the registry with their number of instances or,
given a service name, the instances of that service.

Instances are read the way clients read them: a value that does not decode
or validate is skipped (and reported on stderr), so a service whose values are
all bad shows 0 instances. If etcd does not answer within --timeout, ls fails.

With --layout, ls reads one service as written by the framework it is
migrating from (go-zero, Kratos or etcd naming; --legacy-name when its name
there differs), the way Muster's merged Discovery reads it.

With --legacy (repeatable: [SERVICE=]LAYOUT[:NAME]), ls reads Muster's
registry merged with those legacy sources as clients' merged Discovery does
(the union by address, Muster's instance winning), and a SOURCE column says
where each instance was found: muster, go-zero, kratos or etcd-naming (in
JSON, the metadata "muster.source"). Without a service, the list has a
SOURCES column (instances per source) and also names the services that a
--legacy value names. A --legacy value without SERVICE= applies to every
service, by its Muster name.

The COLOR column is an instance's metadata "color" (the key balancers read by
default; "-" for the base). A service's canary (muster canary) shows in the
CANARY column of the services and under the table of its instances, and its
call policy (muster policy), when one is set, on a "policy:" line after it,
with who set it and when.

JSON output is an array: for services, objects {"name", "instances"} with
"canary" ({"color", "percent"}) when one is set and, with --legacy,
"sources" (instances per source); for instances, the values as stored in
etcd (the color is in "metadata", and with --legacy the source in
"muster.source").

With --cluster NAME=ENDPOINTS (repeatable), ls reads several independent etcd
clusters, each with its own client, as clients' several-cluster Discovery
does: the union, with a CLUSTER column (in JSON, the metadata
"muster.cluster"); without a service, a CLUSTERS column (instances per
cluster). A cluster that does not answer within --timeout is named on stderr
and its instances are left out; ls fails only when none answers. Settings
are per cluster and not shown: list one cluster with --endpoints for them.`,
		Example: `  muster ls
  muster ls user
  muster ls user -o json --endpoints http://10.0.0.1:2379,http://10.0.0.2:2379
  muster ls user --layout go-zero --legacy-name user.rpc
  muster ls user --legacy go-zero:user.rpc --legacy kratos
  muster ls --legacy user=go-zero:user.rpc --legacy kratos
  muster ls user --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
		Args: serviceArg(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			service := ""
			if len(args) == 1 {
				service = args[0]
			}
			specs, err := cls.parse()
			if err != nil {
				return err
			}
			if len(specs) > 0 {
				if layout.layout != layoutMuster || len(layout.legacy) > 0 {
					return usageErrorf("--cluster reads Muster's layout only: not with --layout or --legacy")
				}
				return runLsClusters(cmd.Context(), g, specs, output, service, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if err := layout.onEtcd(g); err != nil {
				return err
			}
			opts, err := layout.options(service)
			if err != nil {
				return err
			}
			srcs, err := layout.sources(service)
			if err != nil {
				return err
			}
			return runLs(cmd.Context(), g, output, service, cmd.OutOrStdout(), cmd.ErrOrStderr(), srcs, &layout, opts...)
		},
	}
	addOutputFlag(cmd, &output)
	layout.add(cmd)
	cls.add(cmd)
	return cmd
}

// serviceRow is one service in ls's output.
type serviceRow struct {
	Name      string `json:"name"`
	Instances int    `json:"instances"`
	// Canary is the service's canary setting, if any.
	Canary *registry.Canary `json:"canary,omitempty"`
	// Sources counts the instances per source (legacy.SourceOf) when
	// legacy sources are merged (--legacy); nil otherwise.
	Sources map[string]int `json:"sources,omitempty"`
	// Clusters counts the instances per cluster (registry.ClusterOf)
	// when several clusters are read (--cluster); nil otherwise.
	Clusters map[string]int `json:"clusters,omitempty"`
}

// runLs lists the services (service == "") or the instances of service in
// the given output format. It fails if etcd does not answer within
// g.timeout. srcs are merged with Muster's registry (--legacy); opts
// select another layout than Muster's (--layout).
func runLs(ctx context.Context, g *globalOptions, output, service string, stdout, stderr io.Writer, srcs []legacySource, layout *layoutFlags,
	opts ...etcd.DiscoveryOption) error {
	s, err := g.connect(ctx, stderr, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.mergeLegacy(srcs); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, g.timeout+reportGrace)
	defer cancel()
	if service == "" {
		rows, err := s.services(ctx, tctx, stderr)
		if err != nil {
			return err
		}
		return writeServices(stdout, stderr, output, g.prefix, rows)
	}
	snap, err := s.snapshot(ctx, tctx, service)
	if err != nil {
		return err
	}
	var overridden map[string]bool
	var canary map[string]*registry.Canary
	var policy string
	if output == outputTable && len(opts) == 0 {
		if overridden, err = s.overridden(ctx, tctx, service, snap.Revision); err != nil {
			return err
		}
		if canary, err = s.canaries(ctx, tctx, stderr, service); err != nil {
			return err
		}
		policy = s.policyNote(tctx, service, stderr)
	}
	if err := writeInstances(stdout, stderr, output, service, snap.Instances, overridden, canary[service]); err != nil {
		return err
	}
	for _, hint := range layout.legacyHints(service, srcs, snap) {
		if _, err := fmt.Fprintln(stderr, hint); err != nil {
			return err
		}
	}
	if policy != "" {
		_, err = fmt.Fprintln(stdout, policy)
	}
	return err
}

// policyNote returns the line that says service has a call policy (muster
// policy), with its fields and who set it when, or "" when it has none. A policy that cannot
// be read is told on stderr, and the listing goes on.
func (s *session) policyNote(ctx context.Context, service string, stderr io.Writer) string {
	info, ok, err := s.admin.Policy(ctx, service)
	if err != nil {
		fmt.Fprintf(stderr, "muster: cannot read the policy of %s: %v\n", service, err)
		return ""
	}
	if !ok {
		return ""
	}
	note := "policy: " + strings.Join(info.Policy.Describe(), ", ") + " (muster policy " + service + ")"
	if by := setBy(info); by != "" {
		note += ", " + by
	}
	return note
}

// overridesAt is implemented by an Admin that reads the overrides at a
// revision of its snapshots (registry/etcd's), so that the instances of a
// snapshot are marked by the overrides that went with them.
type overridesAt interface {
	OverridesAt(ctx context.Context, service string, rev int64) (map[string]registry.Override, error)
}

// overridden returns the IDs of service's instances whose weight an
// operator's override sets, at revision rev (0: the latest) where the
// Admin reads at a revision. parent is the command's context, ctx the
// same with the --timeout deadline.
func (s *session) overridden(parent, ctx context.Context, service string, rev int64) (map[string]bool, error) {
	var ov map[string]registry.Override
	var err error
	if at, ok := s.admin.(overridesAt); ok {
		ov, err = at.OverridesAt(ctx, service, rev)
	} else {
		ov, err = s.admin.Overrides(ctx, service)
	}
	if err != nil {
		return nil, s.fail(parent, "read the overrides of "+service, err)
	}
	ids := map[string]bool{}
	for id, o := range ov {
		if o.Weight != nil {
			ids[id] = true
		}
	}
	return ids, nil
}

// snapshot reads service once: its loaded snapshot, or the reason etcd
// did not give it within ctx (the command's context with the --timeout
// deadline; parent is the command's context).
func (s *session) snapshot(parent, ctx context.Context, service string) (registry.Snapshot, error) {
	w, err := s.view.Watch(ctx, service)
	if err != nil {
		return registry.Snapshot{}, err
	}
	defer w.Close()
	snap, err := waitLoaded(ctx, w)
	if err != nil {
		return registry.Snapshot{}, s.fail(parent, "read service "+service, err)
	}
	return snap, nil
}

// services lists every service with its number of valid instances and its
// canary. parent is the command's context, ctx the same with the --timeout
// deadline; stderr receives notes.
func (s *session) services(parent, ctx context.Context, stderr io.Writer) ([]serviceRow, error) {
	names, err := s.view.Services(ctx)
	if err != nil {
		return nil, s.fail(parent, "list services under "+s.g.prefix, err)
	}
	// Follow every service at once, then wait for each: the loads run in
	// parallel.
	watchers := make([]registry.Watcher, len(names))
	for i, name := range names {
		w, err := s.view.Watch(ctx, name)
		if err != nil {
			return nil, err
		}
		watchers[i] = w
	}
	rows := make([]serviceRow, len(names))
	for i, w := range watchers {
		snap, err := waitLoaded(ctx, w)
		if err != nil {
			return nil, s.fail(parent, "read service "+names[i], err)
		}
		rows[i] = serviceRow{Name: names[i], Instances: len(snap.Instances)}
		if s.merged {
			rows[i].Sources = countSources(snap.Instances)
		}
	}
	canaries, err := s.canaries(parent, ctx, stderr, "", names...)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].Canary = canaries[rows[i].Name]
	}
	return rows, nil
}

func writeServices(stdout, stderr io.Writer, output, prefix string, rows []serviceRow) error {
	if output == outputJSON {
		return writeJSON(stdout, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(stderr, "no services under %s\n", prefix)
		return err
	}
	tw := newTable(stdout)
	if rows[0].Sources == nil {
		fmt.Fprintln(tw, "SERVICE\tINSTANCES\tCANARY")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Name, r.Instances, canaryCell(r.Canary))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "SERVICE\tINSTANCES\tSOURCES\tCANARY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Name, r.Instances, sourcesCell(r.Sources), canaryCell(r.Canary))
	}
	return tw.Flush()
}

// writeInstances writes the instances of service; in a table, canary (nil:
// none) is told under it.
func writeInstances(stdout, stderr io.Writer, output, service string, ins []*registry.Instance, overridden map[string]bool, canary *registry.Canary) error {
	if output == outputJSON {
		vals, err := instancesJSON(ins)
		if err != nil {
			return err
		}
		return writeJSON(stdout, vals)
	}
	if len(ins) == 0 {
		_, err := fmt.Fprintf(stderr, "no instances of %s\n", service)
		if err == nil && canary != nil {
			_, err = fmt.Fprintf(stderr, "canary: %s\n", describeCanary(*canary))
		}
		return err
	}
	if err := writeInstanceTable(stdout, ins, overridden, timeNow()); err != nil {
		return err
	}
	if canary != nil {
		_, err := fmt.Fprintf(stdout, "canary: %s\n", describeCanary(*canary))
		return err
	}
	return nil
}
