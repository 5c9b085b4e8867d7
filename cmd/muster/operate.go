package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// instanceArgs checks <service> <id> and, with extra, more arguments after
// them.
func instanceArgs(extra ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		want := 2 + len(extra)
		if len(args) != want {
			return usageErrorf("%s takes %d arguments (<service> <id>%s), got %d", cmd.CommandPath(), want, extraNames(extra), len(args))
		}
		if err := registry.ValidateName(args[0]); err != nil {
			return usageErrorf("invalid service name: %v", err)
		}
		if err := registry.ValidateID(args[1]); err != nil {
			return usageErrorf("invalid instance id: %v", err)
		}
		return nil
	}
}

func extraNames(extra []string) string {
	s := ""
	for _, e := range extra {
		s += " <" + e + ">"
	}
	return s
}

func newGetCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get <service> <id>",
		Short: "Show one instance, as clients see it",
		Long: `Get shows one instance of a service the way clients see it: its registered
value with any operator override (drain, weight) applied. It fails with exit
code 1 if the instance is not registered.`,
		Example: `  muster get user 10.0.0.7:9000
  muster get user user-1 -o json`,
		Args: instanceArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			if err := g.validate(); err != nil {
				return err
			}
			return runGet(cmd.Context(), g, output, args[0], args[1], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func runGet(ctx context.Context, g *globalOptions, output, service, id string, stdout, stderr io.Writer) error {
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	tctx, cancel := context.WithTimeout(ctx, g.timeout+reportGrace)
	defer cancel()
	snap, err := s.snapshot(ctx, tctx, service)
	if err != nil {
		return err
	}
	for _, in := range snap.Instances {
		if in.ID == id {
			if output == outputJSON {
				v, err := instanceJSON(in)
				if err != nil {
					return err
				}
				return writeJSON(stdout, v)
			}
			return writeInstanceTable(stdout, []*registry.Instance{in}, timeNow())
		}
	}
	return fmt.Errorf("%w: %s/%s", etcd.ErrNoInstance, service, id)
}

func newDeregisterCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "deregister <service> <id>",
		Short: "Delete an instance's registration",
		Long: `Deregister deletes one instance's key (and its override) from the registry:
clients stop calling it within their normal convergence time.

Use it for entries that should not be there, such as a machine that is gone
for good. A live server's registrar owns its instance: it notices the deletion
and writes the instance again within about a second, and the command says so
when the instance's lease is alive. To take a live server out of traffic, use
drain.`,
		Example: `  muster deregister user 10.0.0.7:9000`,
		Args:    instanceArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			var live time.Duration
			err := g.mutate(cmd, "deregister", args[0], args[1], func(ctx context.Context, s *session) error {
				live = liveLease(ctx, s, registry.Key(g.prefix, args[0], args[1]))
				return etcd.Delete(ctx, s.cli, args[0], args[1], etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout))
			})
			if err == nil && live > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s/%s was held by a live lease (%v left): its registrar writes it again within about a second;\n"+
					"to take a live instance out of traffic, run: muster drain %s %s\n", args[0], args[1], live, args[0], args[1])
			}
			return err
		},
	}
}

// liveLease returns how long the lease holding key has left, 0 if the key
// has no lease, is missing, or cannot be read.
func liveLease(ctx context.Context, s *session, key string) time.Duration {
	resp, err := s.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return 0
	}
	ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil || ttl.TTL <= 0 {
		return 0
	}
	return time.Duration(ttl.TTL) * time.Second
}

// weightsHonoured says which balancers follow an instance's weight.
const weightsHonoured = `Only clients whose balancer honours weights follow this: Muster's balancers
(muster_p2c, muster_wrr) and, through "muster xds", ring_hash. gRPC's
round_robin and pick_first ignore weights, drains included: under them a
drained instance keeps getting calls.`

// weightRule is the one rule for weights, on every command that takes one.
var weightRule = fmt.Sprintf("want a whole number 0..%d (0 drains: registered, but no new calls)", registry.MaxWeight)

// parseWeight parses the weight s given as what (an argument or flag) on
// the command line.
func parseWeight(what, s string) (int, error) {
	w, err := strconv.Atoi(s)
	if err != nil || w < 0 || w > registry.MaxWeight {
		return 0, weightError(what, s)
	}
	return w, nil
}

// weightError is the usage error for a weight s, given as what, that
// breaks weightRule.
func weightError(what, s string) error {
	return usageErrorf("%s %s: %s", what, s, weightRule)
}

func newDrainCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "drain <service> <id>",
		Short: "Stop new calls to an instance (weight 0 override)",
		Long: `Drain writes an operator override that gives the instance weight 0: it stays
registered, and clients stop picking it for new calls within their normal
convergence time. The override lives as long as the instance's lease; undrain
removes it. Ls, get and watch mark an overridden weight with "*".

` + weightsHonoured,
		Example: `  muster drain user 10.0.0.7:9000`,
		Args:    instanceArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			zero := 0
			return g.setOverride(cmd, "drain", args[0], args[1], registry.Override{Weight: &zero})
		},
	}
}

func newUndrainCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "undrain <service> <id>",
		Short:   "Remove an operator override (drain or weight)",
		Example: `  muster undrain user 10.0.0.7:9000`,
		Args:    instanceArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			return g.mutate(cmd, "undrain", args[0], args[1], func(ctx context.Context, s *session) error {
				return etcd.ClearOverride(ctx, s.cli, args[0], args[1], etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout))
			})
		},
	}
}

func newWeightCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "weight <service> <id> <weight>",
		Short: "Override an instance's weight",
		Long: fmt.Sprintf(`Weight writes an operator override of the instance's weight (0..%d; 0 is
a drain), which clients follow within their normal convergence time. The
override lives as long as the instance's lease; undrain removes it. Ls, get
and watch mark an overridden weight with "*".

`, registry.MaxWeight) + weightsHonoured,
		Example: `  muster weight user 10.0.0.7:9000 50`,
		Args:    instanceArgs("weight"),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := parseWeight("weight", args[2])
			if err != nil {
				return err
			}
			if err := g.validate(); err != nil {
				return err
			}
			return g.setOverride(cmd, "weight", args[0], args[1], registry.Override{Weight: &w})
		},
	}
}

func (g *globalOptions) setOverride(cmd *cobra.Command, verb, service, id string, o registry.Override) error {
	return g.mutate(cmd, verb, service, id, func(ctx context.Context, s *session) error {
		return etcd.SetOverride(ctx, s.cli, service, id, o, etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout))
	})
}

// mutate runs one change against the registry and reports it.
func (g *globalOptions) mutate(cmd *cobra.Command, verb, service, id string, change func(context.Context, *session) error) error {
	ctx := cmd.Context()
	s, err := g.connect(ctx, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer s.Close()
	if err := change(ctx, s); err != nil {
		if errors.Is(err, etcd.ErrNoInstance) {
			return err
		}
		return g.etcdError(ctx, verb+" "+service+"/"+id, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s/%s: done\n", verb, service, id)
	return nil
}
