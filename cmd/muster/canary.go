package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
)

func newCanaryCmd(g *globalOptions) *cobra.Command {
	var t clusterTarget
	cmd := &cobra.Command{
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
lease: it stays until "off". See docs/RELEASES.md.

` + tracedHelp,
		Example: `  muster canary user blue 5
  muster canary user blue 0.5
  muster canary user
  muster canary user off
  muster canary user blue 5 --in eu --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
		Args: canaryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := t.resolve(g)
			if err != nil {
				return err
			}
			return runCanary(cmd.Context(), c, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	t.add(cmd)
	return cmd
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

// runCanary runs "muster canary" on the registry g names.
func runCanary(ctx context.Context, g *globalOptions, args []string, stdout, stderr io.Writer) error {
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	service := args[0]
	var c registry.Canary
	switch len(args) {
	case 1:
		got, ok, err := s.admin.Canary(ctx, service)
		if badValue(err) {
			return fmt.Errorf("the canary of %s: %w", service, err)
		}
		if err != nil {
			return s.fail(ctx, "read the canary of "+service, err)
		}
		if !ok {
			_, err := fmt.Fprintf(stdout, "%s: no canary\n", service)
			return err
		}
		c = got
	case 2:
		if err := s.admin.ClearCanary(ctx, service); err != nil {
			return s.fail(ctx, "clear the canary of "+service, err)
		}
		_, err := fmt.Fprintf(stdout, "%s: canary off\n", service)
		return err
	default:
		c, _ = parseCanary(args[1], args[2]) // checked by canaryArgs
		if err := s.admin.SetCanary(ctx, service, c); err != nil {
			return s.fail(ctx, "set the canary of "+service, err)
		}
	}
	_, err = fmt.Fprintf(stdout, "%s: %v%% of uncolored calls to %s\n", service, c.Percent, c.Color)
	return err
}
