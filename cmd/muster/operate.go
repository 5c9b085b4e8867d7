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
			overridden, err := s.overridden(ctx, tctx, service, snap.Revision)
			if err != nil {
				return err
			}
			return writeInstanceTable(stdout, []*registry.Instance{in}, overridden, timeNow())
		}
	}
	return &noInstanceError{service: service, id: id}
}

func newDeregisterCmd(g *globalOptions) *cobra.Command {
	var t clusterTarget
	cmd := &cobra.Command{
		Use:   "deregister <service> <id>",
		Short: "Delete an instance's registration",
		Long: `Deregister deletes one instance's key (and its override) from the registry:
clients stop calling it within their normal convergence time. It fails with
exit code 1 if the instance is not registered.

Use it for entries that should not be there, such as a machine that is gone
for good. A live server's registrar owns its instance: it notices the deletion
and writes the instance again within about a second, and the command says so
when the instance's lease is alive. To take a live server out of traffic, use
drain.

` + tracedHelp,
		Example: `  muster deregister user 10.0.0.7:9000`,
		Args:    instanceArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, id := args[0], args[1]
			c, err := t.resolve(g)
			if err != nil {
				return err
			}
			return c.mutate(cmd, "deregister", service, id, func(ctx context.Context, s *session, st instanceState) (string, error) {
				live := liveLease(ctx, s, st.lease)
				if err := etcd.Delete(ctx, s.cli, service, id, c.writeOpts()...); err != nil {
					return "", err
				}
				msg := "deleted"
				if live > 0 {
					msg += fmt.Sprintf("\nnote: %s/%s was held by a live lease (%v left): its registrar writes it again within about a second;\n"+
						"to take a live instance out of traffic, run: muster drain %s %s", service, id, live, service, id)
				}
				return msg, nil
			})
		},
	}
	t.add(cmd)
	return cmd
}

// liveLease returns how long lease has left, 0 if it is 0 (no lease), gone,
// or cannot be read.
func liveLease(ctx context.Context, s *session, lease int64) time.Duration {
	if lease == 0 {
		return 0
	}
	ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil || ttl.TTL <= 0 {
		return 0
	}
	return time.Duration(ttl.TTL) * time.Second
}

// weightsHonoured says which clients follow an instance's weight, per path.
const weightsHonoured = `Who follows this depends on how a client finds the service:
  - Through Muster's resolver (muster:///): Muster's balancers (muster_p2c,
    muster_wrr) follow weights and drains. gRPC's round_robin and pick_first
    ignore weights, drains included: under them a drained instance keeps
    getting calls.
  - Through "muster xds" (xds:///, any gRPC language): a drained instance is
    published as DRAINING, and every xDS client stops calling it within about
    a second, whatever its policy (tested with Go, Node and Python clients).
    Weights other than 0 are followed by ring_hash and, in Go clients that
    import them, by muster_p2c and muster_wrr; round_robin follows only the
    sum per zone (docs/XDS.md).`

// weightRule is the one rule for weights, on every command that takes one.
func weightRule() string {
	return fmt.Sprintf("want a whole number 0..%d (0 drains: registered, but no new calls)", registry.MaxWeight)
}

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
	return usageErrorf("%s %s: %s", what, s, weightRule())
}

func newDrainCmd(g *globalOptions) *cobra.Command {
	var t clusterTarget
	cmd := &cobra.Command{
		Use:   "drain <service> <id>",
		Short: "Stop new calls to an instance (weight 0 override)",
		Long: `Drain writes an operator override that gives the instance weight 0: it stays
registered, and clients stop picking it for new calls within their normal
convergence time. The override lives as long as the instance's lease; undrain
removes it. Ls and get mark an overridden weight with "*", watch with
"override".

` + weightsHonoured + "\n\n" + tracedHelp,
		Example: `  muster drain user 10.0.0.7:9000
  muster drain user user-1 --in eu --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
		Args: instanceArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := t.resolve(g)
			if err != nil {
				return err
			}
			return c.setOverride(cmd, "drain", args[0], args[1], 0)
		},
	}
	t.add(cmd)
	return cmd
}

func newUndrainCmd(g *globalOptions) *cobra.Command {
	var t clusterTarget
	cmd := &cobra.Command{
		Use:   "undrain <service> <id>",
		Short: "Remove an operator override (drain or weight)",
		Long: `Undrain removes the operator override (written by drain or weight) of an
instance: it gets its registered weight back. It fails with exit code 1 if
the instance is not registered, and says so when there is no override.

` + tracedHelp,
		Example: `  muster undrain user 10.0.0.7:9000
  muster undrain user user-1 --in eu --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
		Args: instanceArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, id := args[0], args[1]
			c, err := t.resolve(g)
			if err != nil {
				return err
			}
			return c.mutate(cmd, "undrain", service, id, func(ctx context.Context, s *session, st instanceState) (string, error) {
				if st.override == nil {
					return "nothing to do: no override (weight " + st.registeredWeight() + " as registered)", nil
				}
				if err := etcd.ClearOverride(ctx, s.cli, service, id, c.writeOpts()...); err != nil {
					return "", err
				}
				return fmt.Sprintf("override removed, weight %d -> %s", *st.override.Weight, st.registeredWeight()), nil
			})
		},
	}
	t.add(cmd)
	return cmd
}

func newWeightCmd(g *globalOptions) *cobra.Command {
	var t clusterTarget
	cmd := &cobra.Command{
		Use:   "weight <service> <id> <weight>",
		Short: "Override an instance's weight",
		Long: fmt.Sprintf(`Weight writes an operator override of the instance's weight (0..%d; 0 is
a drain), which clients follow within their normal convergence time. The
override lives as long as the instance's lease; undrain removes it. Ls and
get mark an overridden weight with "*", watch with "override".

`, registry.MaxWeight) + weightsHonoured + "\n\n" + tracedHelp,
		Example: `  muster weight user 10.0.0.7:9000 50
  muster weight user user-1 50 --in eu --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
		Args: instanceArgs("weight"),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := parseWeight("weight", args[2])
			if err != nil {
				return err
			}
			c, err := t.resolve(g)
			if err != nil {
				return err
			}
			return c.setOverride(cmd, "weight", args[0], args[1], w)
		},
	}
	t.add(cmd)
	return cmd
}

// setOverride makes w the override weight of the instance, and says
// when it already is.
func (g *globalOptions) setOverride(cmd *cobra.Command, verb, service, id string, w int) error {
	return g.mutate(cmd, verb, service, id, func(ctx context.Context, s *session, st instanceState) (string, error) {
		if st.override != nil && *st.override.Weight == w {
			return fmt.Sprintf("nothing to do: the override already sets weight %d", w), nil
		}
		err := etcd.SetOverride(ctx, s.cli, service, id, registry.Override{Weight: &w}, g.writeOpts()...)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("done, weight %s -> %d", st.weight(), w), nil
	})
}

// writeOpts are the options of the command's writes: the etcd flags, and
// the command as where the journal records them made from. Who made them
// is the library's default: the etcd user (--user), else the local user.
func (g *globalOptions) writeOpts() []etcd.Option {
	return []etcd.Option{etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout), etcd.WithSource(registry.SourceCommand)}
}

// instanceState is what etcd holds for one instance.
type instanceState struct {
	// in is the registered value; ok is false if it does not decode.
	in registry.Instance
	ok bool
	// override is the operator's override, nil if none (or one that does
	// not decode, or sets no weight).
	override *registry.Override
	// lease holds the instance's key; 0: none.
	lease int64
}

// registeredWeight is the weight the instance was registered with, "?" if
// its value does not decode.
func (st instanceState) registeredWeight() string {
	if !st.ok {
		return "?"
	}
	return strconv.Itoa(st.in.EffectiveWeight())
}

// weight is the weight clients see: the override's, else the registered
// one.
func (st instanceState) weight() string {
	if st.override != nil {
		return strconv.Itoa(*st.override.Weight)
	}
	return st.registeredWeight()
}

// noInstanceError reports an instance that is not registered.
type noInstanceError struct{ service, id string }

func (e *noInstanceError) Error() string {
	return fmt.Sprintf("no such instance: service %s has no instance %s (\"muster ls %s\" lists its instances)", e.service, quoteIfNeeded(e.id), e.service)
}

// Is makes a noInstanceError match etcd.ErrNoInstance.
func (e *noInstanceError) Is(target error) bool { return target == etcd.ErrNoInstance }

// readInstance reads the instance's key and its override key. It fails
// with a noInstanceError if the instance is not registered.
func (s *session) readInstance(ctx context.Context, service, id string) (instanceState, error) {
	key := registry.Key(s.g.prefix, service, id)
	okey := registry.OverrideKey(s.g.prefix, service, id)
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(okey)).Commit()
	if err != nil {
		return instanceState{}, err
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return instanceState{}, &noInstanceError{service: service, id: id}
	}
	st := instanceState{lease: kvs[0].Lease}
	st.in, err = registry.Unmarshal(kvs[0].Value)
	st.ok = err == nil
	if okvs := resp.Responses[1].GetResponseRange().GetKvs(); len(okvs) > 0 {
		if o, err := registry.UnmarshalOverride(okvs[0].Value); err == nil && o.Weight != nil {
			st.override = &o
		}
	}
	return st, nil
}

// mutate reads the instance, runs one change against the registry and
// prints "<verb> <service>/<id>: " and what change says it did. It fails if
// the instance is not registered.
func (g *globalOptions) mutate(cmd *cobra.Command, verb, service, id string, change func(context.Context, *session, instanceState) (string, error)) error {
	ctx := cmd.Context()
	s, err := g.connect(ctx, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer s.Close()
	what := verb + " " + service + "/" + id
	if g.clusterName != "" {
		what += " in cluster " + g.clusterName
	}
	rctx, cancel := context.WithTimeout(ctx, g.timeout)
	st, err := s.readInstance(rctx, service, id)
	cancel()
	var msg string
	if err == nil {
		msg, err = change(ctx, s, st)
	}
	switch {
	case err == nil:
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", what, msg)
		return nil
	case errors.Is(err, etcd.ErrNoInstance):
		// Gone between the read and the write, too.
		return &noInstanceError{service: service, id: id}
	default:
		return g.etcdError(ctx, what, err)
	}
}
