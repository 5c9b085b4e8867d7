package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/zookeeper"
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
			return c.mutate(cmd, "deregister", service, id, removes, func(ctx context.Context, s *session, _ instanceState) (string, error) {
				live := liveLease(ctx, s, service, id)
				if err := s.admin.(registry.InstanceRemover).RemoveInstance(ctx, service, id); err != nil {
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

// removes checks that the session's registry removes an instance another
// process registered (registry.InstanceRemover), which deregister needs.
func removes(s *session) error {
	if _, ok := s.admin.(registry.InstanceRemover); ok {
		return nil
	}
	return usageErrorf("--registry %s: deregister removes an instance another process registered, which %s cannot do "+
		"(its Admin is no registry.InstanceRemover: an instance lives as long as its registrar's session); "+
		"to take it out of traffic, use drain", s.g.registry, s.where())
}

// leaseReader is implemented by an Admin whose instances are bound to
// leases another process keeps alive (registry/etcd's).
type leaseReader interface {
	LeaseLeft(ctx context.Context, service, id string) (time.Duration, error)
}

// liveLease returns how long the lease that holds the instance has left,
// 0 if it has none (or a registry without leases), it is gone, or it
// cannot be read.
func liveLease(ctx context.Context, s *session, service, id string) time.Duration {
	lr, ok := s.admin.(leaseReader)
	if !ok {
		return 0
	}
	left, err := lr.LeaseLeft(ctx, service, id)
	if err != nil {
		return 0
	}
	return left
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
			return c.mutate(cmd, "undrain", service, id, nil, func(ctx context.Context, s *session, st instanceState) (string, error) {
				if st.override == nil {
					return "nothing to do: no override (weight " + st.registeredWeight() + " as registered)", nil
				}
				if err := s.admin.ClearOverride(ctx, service, id); err != nil {
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
	return g.mutate(cmd, verb, service, id, nil, func(ctx context.Context, s *session, st instanceState) (string, error) {
		if st.override != nil && *st.override.Weight == w {
			return fmt.Sprintf("nothing to do: the override already sets weight %d", w), nil
		}
		if err := s.admin.SetOverride(ctx, service, id, registry.Override{Weight: &w}); err != nil {
			return "", err
		}
		return fmt.Sprintf("done, weight %s -> %d", st.weight(), w), nil
	})
}

// instanceState is what the registry holds for one instance.
type instanceState struct {
	// in is the registered value; ok is false if it does not decode.
	in registry.Instance
	ok bool
	// override is the operator's override, nil if none (or one that does
	// not decode, or sets no weight).
	override *registry.Override
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

// Is makes a noInstanceError match registry.ErrNoInstance, and each
// backend's (etcd.ErrNoInstance).
func (e *noInstanceError) Is(target error) bool {
	return target == registry.ErrNoInstance || target == etcd.ErrNoInstance || target == zookeeper.ErrNoInstance
}

// instanceReader is implemented by an Admin that reads one instance as
// it was registered, without its override (registry/etcd's and
// registry/zookeeper's): it fails with an error matching
// registry.ErrNoInstance if there is none, and with the decoding error
// if its value does not decode.
type instanceReader interface {
	Registered(ctx context.Context, service, id string) (registry.Instance, error)
}

// readInstance reads the instance as registered and its override. It
// fails with a noInstanceError if the instance is not registered.
func (s *session) readInstance(ctx context.Context, service, id string) (instanceState, error) {
	ir, ok := s.admin.(instanceReader)
	if !ok {
		return instanceState{}, fmt.Errorf("%s: its registry does not read one instance", s.where())
	}
	in, err := ir.Registered(ctx, service, id)
	switch {
	case errors.Is(err, registry.ErrNoInstance):
		return instanceState{}, &noInstanceError{service: service, id: id}
	case err != nil && !badValue(err):
		return instanceState{}, err
	}
	st := instanceState{in: in, ok: err == nil}
	ov, err := s.admin.Overrides(ctx, service)
	if err != nil {
		return instanceState{}, err
	}
	if o, ok := ov[id]; ok && o.Weight != nil {
		st.override = &o
	}
	return st, nil
}

// mutate reads the instance, runs one change against the registry and
// prints "<verb> <service>/<id>: " and what change says it did. It fails if
// the instance is not registered, or before reading it with check's error
// when check (if not nil) says the registry cannot make the change.
func (g *globalOptions) mutate(cmd *cobra.Command, verb, service, id string, check func(*session) error,
	change func(context.Context, *session, instanceState) (string, error)) error {
	ctx := cmd.Context()
	s, err := g.connect(ctx, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer s.Close()
	if check != nil {
		if err := check(s); err != nil {
			return err
		}
	}
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
	case errors.Is(err, registry.ErrNoInstance):
		// Gone between the read and the write, too.
		return &noInstanceError{service: service, id: id}
	default:
		return s.fail(ctx, what, err)
	}
}
