package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

// zkScheme starts a --registry value naming ZooKeeper servers.
const zkScheme = "zk://"

// zkCommand reports whether command works on a ZooKeeper registry.
func zkCommand(name string) bool {
	switch name {
	case "ls", "get", "watch", "drain", "undrain", "weight", "canary", "policy":
		return true
	}
	return false
}

// addRegistryFlag adds --registry to cmd and routes the command to its
// ZooKeeper version when the flag names ZooKeeper servers. A command
// that runs nothing itself (only its subcommands do) gets no flag.
func (g *globalOptions) addRegistryFlag(cmd *cobra.Command) {
	if cmd.RunE == nil {
		return
	}
	cmd.Flags().StringVar(&g.registry, "registry", "",
		"the registry: zk://host:port,host:port for ZooKeeper (ls, get, watch, drain, undrain, weight, canary, policy); empty for etcd at --endpoints ($MUSTER_REGISTRY)")
	etcdRun := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		servers, err := g.zkServers()
		if err != nil {
			return err
		}
		if servers == nil {
			return etcdRun(cmd, args)
		}
		if !zkCommand(cmd.Name()) {
			return usageErrorf("--registry %s: %s works on etcd only", g.registry, cmd.Name())
		}
		return runZK(cmd, g, servers, args)
	}
}

// zkServers returns the ZooKeeper servers --registry names, nil for etcd.
func (g *globalOptions) zkServers() ([]string, error) {
	if g.registry == "" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(g.registry, zkScheme)
	if !ok {
		return nil, usageErrorf("--registry %q: want zk://host:port[,host:port...]", g.registry)
	}
	var servers []string
	for _, s := range strings.Split(rest, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.Contains(s, ":") || strings.Contains(s, "/") {
			return nil, usageErrorf("--registry %q: server %q is not host:port", g.registry, s)
		}
		servers = append(servers, s)
	}
	if len(servers) == 0 {
		return nil, usageErrorf("--registry %q: no server", g.registry)
	}
	return servers, nil
}

func (g *globalOptions) zkOptions(stderr io.Writer) []zookeeper.Option {
	log := g.log.logger(stderr, slog.LevelError)
	return []zookeeper.Option{zookeeper.WithRoot(g.prefix), zookeeper.WithRequestTimeout(g.timeout), zookeeper.WithLogger(log)}
}

// runZK runs one of zkCommands against ZooKeeper.
func runZK(cmd *cobra.Command, g *globalOptions, servers []string, args []string) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	output, _ := cmd.Flags().GetString("output")
	if f := cmd.Flags().Lookup("layout"); f != nil && f.Changed {
		return usageErrorf("--layout: not with --registry %s", g.registry)
	}
	d, err := zookeeper.NewDiscovery(servers, g.zkOptions(stderr)...)
	if err != nil {
		return err
	}
	defer d.Close()
	z := &zkSession{g: g, servers: servers, d: d}
	switch cmd.Name() {
	case "ls":
		if len(args) == 0 {
			return z.services(ctx, output, stdout, stderr)
		}
		return z.instances(ctx, output, args[0], "", stdout, stderr)
	case "get":
		return z.instances(ctx, output, args[0], args[1], stdout, stderr)
	case "watch":
		return z.watch(ctx, output, args[0], stdout)
	case "canary":
		return runCanaryOn(ctx, zkSettings{z: z, opts: g.zkOptions(stderr)}, args, stdout)
	case "policy":
		pc, err := parsePolicyArgs(cmd, args)
		if err != nil {
			return err
		}
		return runPolicyOn(ctx, zkSettings{z: z, opts: g.zkOptions(stderr)}, "", output, pc, stdout, stderr)
	case "undrain":
		return z.mutate(cmd, "undrain", args[0], args[1], nil)
	case "drain":
		w := 0
		return z.mutate(cmd, "drain", args[0], args[1], &w)
	default: // weight
		w, err := parseWeight("weight", args[2])
		if err != nil {
			return err
		}
		return z.mutate(cmd, "weight", args[0], args[1], &w)
	}
}

// zkSession is one command's connection to ZooKeeper.
type zkSession struct {
	g       *globalOptions
	servers []string
	d       *zookeeper.Discovery
}

func (z *zkSession) fail(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: ZooKeeper at %s did not answer within --timeout %v: %w", what, strings.Join(z.servers, ","), z.g.timeout, err)
	}
	return fmt.Errorf("%s (ZooKeeper at %s): %w", what, strings.Join(z.servers, ","), err)
}

// snapshot reads service once, within --timeout.
func (z *zkSession) snapshot(ctx context.Context, service string) (registry.Snapshot, error) {
	tctx, cancel := context.WithTimeout(ctx, z.g.timeout)
	defer cancel()
	w, err := z.d.Watch(tctx, service)
	if err != nil {
		return registry.Snapshot{}, err
	}
	defer w.Close()
	snap, err := waitLoaded(tctx, w)
	if err != nil {
		return snap, z.fail("read service "+service, err)
	}
	return snap, nil
}

// overridden returns the IDs of service's instances whose weight an
// override sets.
func (z *zkSession) overridden(ctx context.Context, service string) (map[string]bool, error) {
	ov, err := z.d.Overrides(ctx, service)
	if err != nil {
		return nil, z.fail("read the overrides of "+service, err)
	}
	ids := map[string]bool{}
	for id, o := range ov {
		ids[id] = o.Weight != nil
	}
	return ids, nil
}

func (z *zkSession) services(ctx context.Context, output string, stdout, stderr io.Writer) error {
	names, err := z.d.Services(ctx)
	if err != nil {
		return z.fail("list services under "+z.g.prefix, err)
	}
	rows := make([]serviceRow, len(names))
	for i, name := range names {
		snap, err := z.snapshot(ctx, name)
		if err != nil {
			return err
		}
		rows[i] = serviceRow{Name: name, Instances: len(snap.Instances)}
	}
	return writeServices(stdout, stderr, output, z.g.prefix, rows)
}

// instances prints service's instances (ls), or instance id (get).
func (z *zkSession) instances(ctx context.Context, output, service, id string, stdout, stderr io.Writer) error {
	snap, err := z.snapshot(ctx, service)
	if err != nil {
		return err
	}
	ins := snap.Instances
	if id != "" {
		ins = nil
		for _, in := range snap.Instances {
			if in.ID == id {
				ins = append(ins, in)
			}
		}
		if len(ins) == 0 {
			return &noInstanceError{service: service, id: id}
		}
	}
	var overridden map[string]bool
	if output != outputJSON {
		if overridden, err = z.overridden(ctx, service); err != nil {
			return err
		}
	}
	if id == "" {
		return writeInstances(stdout, stderr, output, service, ins, overridden, nil)
	}
	if output == outputJSON {
		v, err := instanceJSON(ins[0])
		if err != nil {
			return err
		}
		return writeJSON(stdout, v)
	}
	return writeInstanceTable(stdout, ins, overridden, timeNow())
}

// watch prints service's instances, then its changes, until ctx ends.
func (z *zkSession) watch(ctx context.Context, output, service string, stdout io.Writer) error {
	w, err := z.d.Watch(ctx, service)
	if err != nil {
		return err
	}
	defer w.Close()
	tctx, cancel := context.WithTimeout(ctx, z.g.timeout)
	snap, err := waitLoaded(tctx, w)
	cancel()
	if err != nil {
		return ignoreEnd(ctx, z.fail("read service "+service, err))
	}
	p := &watchPrinter{w: stdout, json: output == outputJSON, service: service}
	if !p.json {
		p.readOverrides = func(int64) map[string]bool {
			ov, _ := z.overridden(ctx, service)
			return ov
		}
	}
	p.list(snap)
	if snap.Stale() {
		p.stale(snap)
	}
	for prev := snap; p.err == nil; {
		if err := nextUpdate(ctx, w); err != nil {
			return ignoreEnd(ctx, err)
		}
		cur := w.Snapshot()
		p.changes(prev, cur)
		prev = cur
	}
	return fmt.Errorf("watch: write output: %w", p.err)
}

// nextUpdate waits for w's next update; it fails when ctx ends or w is
// closed.
func nextUpdate(ctx context.Context, w registry.Watcher) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case _, ok := <-w.Updates():
		if !ok {
			return errors.New("watch: the watcher was closed")
		}
		return nil
	}
}

// ignoreEnd returns nil if ctx has ended (the command was interrupted),
// else err.
func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// mutate sets the override weight of an instance to *w, or clears it (w
// nil), and prints what it did.
func (z *zkSession) mutate(cmd *cobra.Command, verb, service, id string, w *int) error {
	ctx := cmd.Context()
	what := verb + " " + service + "/" + id
	in, err := z.d.Registered(ctx, service, id)
	if errors.Is(err, zookeeper.ErrNoInstance) {
		return &noInstanceError{service: service, id: id}
	}
	st := instanceState{in: in, ok: err == nil}
	if err != nil && !errors.Is(err, registry.ErrMalformedValue) && !errors.Is(err, registry.ErrInvalidInstance) && !errors.Is(err, registry.ErrUnsupportedVersion) {
		return z.fail(what, err)
	}
	ov, err := z.d.Overrides(ctx, service)
	if err != nil {
		return z.fail(what, err)
	}
	if o, ok := ov[id]; ok && o.Weight != nil {
		st.override = &o
	}
	opts := z.g.zkOptions(cmd.ErrOrStderr())
	var msg string
	switch {
	case w == nil && st.override == nil:
		msg = "nothing to do: no override (weight " + st.registeredWeight() + " as registered)"
	case w == nil:
		err = zookeeper.ClearOverride(ctx, z.servers, service, id, opts...)
		msg = fmt.Sprintf("override removed, weight %d -> %s", *st.override.Weight, st.registeredWeight())
	case st.override != nil && *st.override.Weight == *w:
		msg = fmt.Sprintf("nothing to do: the override already sets weight %d", *w)
	default:
		err = zookeeper.SetOverride(ctx, z.servers, service, id, registry.Override{Weight: w}, opts...)
		msg = fmt.Sprintf("done, weight %s -> %d", st.weight(), *w)
	}
	switch {
	case errors.Is(err, zookeeper.ErrNoInstance):
		return &noInstanceError{service: service, id: id}
	case err != nil:
		return z.fail(what, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", what, msg)
	return nil
}
