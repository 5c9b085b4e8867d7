package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// watchProgressInterval is how often watch has etcd confirm a quiet watch;
// a snapshot turns stale after three intervals without an answer. Tests
// shorten it.
var watchProgressInterval = 2 * time.Second

func newWatchCmd(g *globalOptions) *cobra.Command {
	var output string
	var layout layoutFlags
	var cls clusterFlags
	cmd := &cobra.Command{
		Use:   "watch <service>",
		Short: "Print a service's instances, then every change",
		Long: `Watch prints the current instances of a service, then one line per change
as clients see it, until interrupted. Each line starts with when it was
printed (UTC, to the millisecond, e.g. 2026-12-03T10:20:00.123Z), then:

  # service: N instances ...  the header
  = id addr (...)             an instance present at the start
  + id addr (...)             an instance was added
  - id addr                   an instance was removed
  ~ id addr (weight 100->0)   an instance changed (the fields that did)

  % canary 5% of uncolored calls to blue   the canary (muster canary) changed
  % canary off                             the canary was removed

An instance whose ID is its address is named by the address alone; a weight
set by an operator (muster weight or drain) is marked "override"; an instance
with metadata color=<c> shows "color <c>", a change of it "color -->blue". A
canary set at the start is printed after the list.
  ! stale since ...           etcd stopped answering; the last known list stays
  ! fresh again ...           etcd answers again; changes missed meanwhile follow

With -o json it prints one JSON object per event and line: "list" (with all
instances) first, then "added", "removed", "changed" (with "previous"),
"stale", "fresh" and "canary" (with "canary": {"color", "percent"}, absent when
removed). Instances have the field names of the stored values.

With --layout, watch follows the service as written by the framework it is
migrating from (go-zero, Kratos or etcd naming; --legacy-name when its name
there differs), as ls --layout lists it. With --legacy (repeatable:
[SERVICE=]LAYOUT[:NAME]), it follows Muster's registry merged with those
legacy sources, as clients' merged Discovery does, and each instance says
where it was found: "source go-zero" (in JSON, the metadata
"muster.source").

With --cluster NAME=ENDPOINTS (repeatable), watch follows the service in
several independent etcd clusters, as clients' several-cluster Discovery does:
each instance says its cluster ("cluster eu"; in JSON, the metadata
"muster.cluster"), and staleness is told per cluster ("! cluster us stale
since ...", "! cluster us fresh again"; in JSON with "cluster"). A cluster
that does not answer at the start is named on stderr and joins when it
answers; watch fails only when none answers. Overrides and the canary are
per cluster and not followed.

If etcd does not answer within --timeout at the start, watch fails.`,
		Example: `  muster watch user
  muster watch user -o json | jq .
  muster watch user --layout go-zero --legacy-name user.rpc
  muster watch user --legacy go-zero:user.rpc --legacy kratos
  muster watch user --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
		Args: serviceArg(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			specs, err := cls.parse()
			if err != nil {
				return err
			}
			if len(specs) > 0 && (layout.layout != layoutMuster || len(layout.legacy) > 0) {
				return usageErrorf("--cluster reads Muster's layout only: not with --layout or --legacy")
			}
			if err := layout.onEtcd(g); err != nil {
				return err
			}
			opts, err := layout.options(args[0])
			if err != nil {
				return err
			}
			srcs, err := layout.sources(args[0])
			if err != nil {
				return err
			}
			return runWatch(cmd.Context(), g, watchSource{specs: specs, srcs: srcs, opts: opts}, output, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addOutputFlag(cmd, &output)
	layout.add(cmd)
	cls.add(cmd)
	return cmd
}

// watchSource is what watch reads: several clusters (specs), or
// Muster's registry merged with srcs (--legacy), read in the layout opts
// select (--layout), which has no overrides and no canary.
type watchSource struct {
	specs []clusterSpec
	srcs  []legacySource
	opts  []etcd.DiscoveryOption
}

// runWatch prints service's instances and then its changes to stdout
// until ctx ends, when it returns nil. It fails if etcd does not answer
// within g.timeout at the start (with several clusters: if none does), or
// if stdout cannot be written.
func runWatch(ctx context.Context, g *globalOptions, src watchSource, output, service string, stdout, stderr io.Writer) error {
	progress := etcd.WithProgressInterval(watchProgressInterval)
	var s *session
	var err error
	if len(src.specs) > 0 {
		s, err = g.connectClusters(stderr, src.specs, progress)
	} else {
		s, err = g.connect(ctx, stderr, append([]etcd.DiscoveryOption{progress}, src.opts...)...)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.mergeLegacy(src.srcs); err != nil {
		return err
	}
	w, err := s.view.Watch(ctx, service)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, g.timeout+reportGrace)
	var snap registry.Snapshot
	if len(src.specs) > 0 {
		snap, err = waitClusters(tctx, w, stderr)
	} else {
		snap, err = waitLoaded(tctx, w)
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return s.fail(ctx, "read service "+service, err)
	}
	// Overrides and the canary are read from Muster's own registry, in
	// its layout; several clusters have a setting each, not followed.
	settings := len(src.opts) == 0 && len(src.specs) == 0

	p := &watchPrinter{w: stdout, json: output == outputJSON, service: service}
	if !p.json && settings {
		// Which weights are overrides; unknown (unmarked) if etcd does
		// not say within --timeout.
		p.readOverrides = func(rev int64) map[string]bool {
			rctx, cancel := context.WithTimeout(ctx, g.timeout)
			defer cancel()
			ov, _ := s.overridden(ctx, rctx, service, rev)
			return ov
		}
	}
	// Follow the canary only if this user may read it (see canaries).
	var canaries <-chan registry.Canary
	var initial map[string]*registry.Canary
	if settings {
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		initial, err = s.canaries(ctx, rctx, stderr, service)
		cancel()
		if err != nil {
			return err
		}
	}
	if src, ok := s.store.(registry.CanarySource); ok && initial != nil {
		canaries = src.WatchCanary(ctx, service)
	}

	p.list(snap)
	switch {
	case snap.Clusters != nil:
		// Each stale cluster, as a change from all fresh.
		prev := snap
		prev.Clusters = slices.Clone(snap.Clusters)
		for i := range prev.Clusters {
			prev.Clusters[i].Loaded, prev.Clusters[i].StaleSince = true, time.Time{}
		}
		p.clusterChanges(prev, snap)
	case snap.Stale():
		p.stale(snap)
	}
	prev := snap
	var canary registry.Canary
	for p.err == nil {
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-canaries:
			if !ok {
				canaries = nil // ctx ended
				continue
			}
			if c != canary {
				p.canary(c)
				canary = c
			}
			continue
		case _, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("watch: the watcher was closed")
			}
		}
		cur := w.Snapshot()
		p.changes(prev, cur)
		prev = cur
	}
	return fmt.Errorf("watch: write output: %w", p.err)
}

// watchEvent is one line of watch's JSON output.
type watchEvent struct {
	Time      time.Time         `json:"time"`
	Event     string            `json:"event"`
	Service   string            `json:"service"`
	Revision  int64             `json:"revision,omitzero"`
	Instances []json.RawMessage `json:"instances,omitzero"`
	Instance  json.RawMessage   `json:"instance,omitzero"`
	Previous  json.RawMessage   `json:"previous,omitzero"`
	Since     time.Time         `json:"since,omitzero"`
	Error     string            `json:"error,omitzero"`
	Canary    *registry.Canary  `json:"canary,omitzero"`
	// Cluster names the cluster a stale or fresh event is about, when
	// several clusters are followed (--cluster).
	Cluster string `json:"cluster,omitzero"`
}

// watchPrinter writes watch's output. The first write error stops it and
// is kept in err.
type watchPrinter struct {
	w       io.Writer
	json    bool
	service string
	err     error
	// readOverrides returns the IDs of the instances whose weight an
	// operator's override sets at a revision; nil: not marked.
	readOverrides func(rev int64) map[string]bool
	// overridden is the last result of readOverrides.
	overridden map[string]bool
}

// overrides reads which weights are overrides at revision rev.
func (p *watchPrinter) overrides(rev int64) {
	if p.readOverrides != nil {
		p.overridden = p.readOverrides(rev)
	}
}

// watchTimeFormat is the time that starts each line of the table: the
// JSON events' time, to the millisecond.
const watchTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// line prints one line of the table, starting with the time.
func (p *watchPrinter) line(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, "%s "+format+"\n", append([]any{timeNow().UTC().Format(watchTimeFormat)}, args...)...)
	}
}

func (p *watchPrinter) event(ev watchEvent) {
	if p.err != nil {
		return
	}
	ev.Time = timeNow().UTC()
	ev.Service = p.service
	b, err := json.Marshal(ev)
	if err != nil {
		p.err = err
		return
	}
	_, p.err = p.w.Write(append(b, '\n'))
}

func (p *watchPrinter) instance(in *registry.Instance) json.RawMessage {
	b, err := instanceJSON(in)
	if err != nil && p.err == nil {
		p.err = err
	}
	return b
}

// list prints the initial snapshot.
func (p *watchPrinter) list(s registry.Snapshot) {
	if p.json {
		ins, err := instancesJSON(s.Instances)
		if err != nil {
			p.err = err
			return
		}
		p.event(watchEvent{Event: "list", Revision: s.Revision, Instances: ins})
		return
	}
	p.line("# %s: %s at revision %d; watching for changes", p.service, plural(len(s.Instances), "instance"), s.Revision)
	p.overrides(s.Revision)
	for _, in := range s.Instances {
		p.line("= %s %s", idAddr(in), describeInstance(in, isOverridden(p.overridden, in)))
	}
}

func (p *watchPrinter) stale(s registry.Snapshot) {
	p.staleSince("", s.Revision, s.StaleSince, s.Err, len(s.Instances))
}

// staleSince prints that the list (of cluster, if not "") went stale at
// since for err, n instances kept.
func (p *watchPrinter) staleSince(cluster string, rev int64, since time.Time, err error, n int) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if p.json {
		p.event(watchEvent{Event: "stale", Cluster: cluster, Revision: rev, Since: since.UTC(), Error: msg})
		return
	}
	at := since.UTC().Format(time.RFC3339)
	if cluster == "" {
		p.line("! stale since %s: %s (showing the last known %s)", at, msg, plural(n, "instance"))
		return
	}
	p.line("! cluster %s stale since %s: %s (showing its last known %s)", cluster, at, msg, plural(n, "instance"))
}

// canary prints a change of the canary setting; the zero Canary is none.
func (p *watchPrinter) canary(c registry.Canary) {
	if p.json {
		ev := watchEvent{Event: "canary"}
		if c != (registry.Canary{}) {
			ev.Canary = &c
		}
		p.event(ev)
		return
	}
	if c == (registry.Canary{}) {
		p.line("%% canary off")
		return
	}
	p.line("%% canary %s", describeCanary(c))
}

func (p *watchPrinter) fresh(s registry.Snapshot) {
	if p.json {
		p.event(watchEvent{Event: "fresh", Revision: s.Revision})
		return
	}
	p.line("! fresh again at revision %d", s.Revision)
}

// instanceKey identifies an instance across snapshots: its ID within its
// source and cluster, since a merged list may hold two sources' instances
// of one ID, and a list of several clusters two clusters'.
type instanceKey struct{ source, cluster, id string }

func keyOf(in *registry.Instance) instanceKey {
	return instanceKey{legacy.SourceOf(in), registry.ClusterOf(in), in.ID}
}

// clusterChanges prints each cluster whose part became stale or fresh
// between two snapshots of several clusters, and each one that answered
// for the first time.
func (p *watchPrinter) clusterChanges(prev, cur registry.Snapshot) {
	for i, c := range cur.Clusters {
		var was registry.ClusterSnapshot
		if i < len(prev.Clusters) {
			was = prev.Clusters[i]
		}
		switch {
		case !was.Stale() && c.Stale():
			p.staleSince(c.Cluster, 0, c.StaleSince, c.Err, len(c.Instances))
		case (was.Stale() || !was.Loaded) && !c.Stale() && c.Loaded:
			if p.json {
				p.event(watchEvent{Event: "fresh", Cluster: c.Cluster})
				continue
			}
			p.line("! cluster %s fresh again", c.Cluster)
		}
	}
}

// changes prints what differs between two snapshots: a change of
// staleness first, then changed, removed and added instances, each in ID
// order.
func (p *watchPrinter) changes(prev, cur registry.Snapshot) {
	switch {
	case cur.Clusters != nil:
		p.clusterChanges(prev, cur)
	case !prev.Stale() && cur.Stale():
		p.stale(cur)
	case prev.Stale() && !cur.Stale():
		p.fresh(cur)
	}
	old := make(map[instanceKey]*registry.Instance, len(prev.Instances))
	for _, in := range prev.Instances {
		old[keyOf(in)] = in
	}
	// Which weights are overrides, read again only when a weight may
	// have changed.
	was := p.overridden
	for _, in := range cur.Instances {
		if o, ok := old[keyOf(in)]; !ok || o.EffectiveWeight() != in.EffectiveWeight() {
			p.overrides(cur.Revision)
			break
		}
	}
	var added []*registry.Instance
	for _, in := range cur.Instances {
		o, ok := old[keyOf(in)]
		delete(old, keyOf(in))
		switch {
		case !ok:
			added = append(added, in)
		case o != in && !o.Equal(*in):
			if p.json {
				p.event(watchEvent{Event: "changed", Revision: cur.Revision, Instance: p.instance(in), Previous: p.instance(o)})
			} else {
				p.line("~ %s %s", idAddr(in), describeChange(o, in, isOverridden(was, o), isOverridden(p.overridden, in)))
			}
		}
	}
	for _, in := range prev.Instances {
		if _, gone := old[keyOf(in)]; !gone {
			continue
		}
		if p.json {
			p.event(watchEvent{Event: "removed", Revision: cur.Revision, Instance: p.instance(in)})
		} else {
			p.line("- %s", idAddr(in))
		}
	}
	for _, in := range added {
		if p.json {
			p.event(watchEvent{Event: "added", Revision: cur.Revision, Instance: p.instance(in)})
		} else {
			p.line("+ %s %s", idAddr(in), describeInstance(in, isOverridden(p.overridden, in)))
		}
	}
}
