package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func newCanaryCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "canary <service> [<color> <percent> | off]",
		Short: "Send a share of a service's uncolored calls to one color",
		Long: `Canary sets the canary of a service: <percent> (0 to 100, decimals allowed)
of its uncolored calls go to its instances of <color> (metadata color=<color>)
instead of the base. Clients apply a change within about a second, without a
restart. A call with a canary key (color.WithKey, such as a user ID) always
gets the same answer for the same share, so one user sees one version.
"off" removes the canary; with the service alone, the command shows it.

Only clients whose resolver follows canaries (resolver.WithCanaries) and whose
balancer is muster_p2c or muster_wrr apply it. The setting is bound to no
lease: it stays until "off". See docs/RELEASES.md.`,
		Example: `  muster canary user blue 5
  muster canary user blue 0.5
  muster canary user
  muster canary user off`,
		Args: canaryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCanary(cmd.Context(), g, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func canaryArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || len(args) > 3 || (len(args) == 2 && args[1] != "off") {
		return usageErrorf("%s takes <service> [<color> <percent> | off], got %d arguments", cmd.CommandPath(), len(args))
	}
	if err := registry.ValidateName(args[0]); err != nil {
		return usageErrorf("invalid service name: %v", err)
	}
	if len(args) == 3 {
		if _, err := parseCanary(args[1], args[2]); err != nil {
			return usageErrorf("%v", err)
		}
	}
	return nil
}

func parseCanary(color, percent string) (registry.Canary, error) {
	p, err := strconv.ParseFloat(percent, 64)
	if err != nil {
		return registry.Canary{}, fmt.Errorf("percent %q is not a number", percent)
	}
	c := registry.Canary{Color: color, Percent: p}
	if err := c.Validate(); err != nil {
		return registry.Canary{}, fmt.Errorf("invalid canary: %w", err)
	}
	return c, nil
}

func runCanary(ctx context.Context, g *globalOptions, args []string, stdout, stderr io.Writer) error {
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	service := args[0]
	opts := []etcd.Option{etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout)}
	switch len(args) {
	case 1:
		tctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		key := registry.CanaryKey(g.prefix, service)
		resp, err := s.cli.Get(tctx, key)
		if err != nil {
			return g.etcdError(ctx, "read the canary of "+service, err)
		}
		if len(resp.Kvs) == 0 {
			fmt.Fprintf(stdout, "%s: no canary\n", service)
			return nil
		}
		c, err := registry.UnmarshalCanary(resp.Kvs[0].Value)
		if err != nil {
			return fmt.Errorf("the canary of %s at %s: %w", service, key, err)
		}
		fmt.Fprintf(stdout, "%s: %v%% of uncolored calls to %s\n", service, c.Percent, c.Color)
	case 2:
		if err := etcd.ClearCanary(ctx, s.cli, service, opts...); err != nil {
			return g.etcdError(ctx, "clear the canary of "+service, err)
		}
		fmt.Fprintf(stdout, "%s: canary off\n", service)
	default:
		c, _ := parseCanary(args[1], args[2]) // checked by canaryArgs
		if err := etcd.SetCanary(ctx, s.cli, service, c, opts...); err != nil {
			return g.etcdError(ctx, "set the canary of "+service, err)
		}
		fmt.Fprintf(stdout, "%s: %v%% of uncolored calls to %s\n", service, c.Percent, c.Color)
	}
	return nil
}
