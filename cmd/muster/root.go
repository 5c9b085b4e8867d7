package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // the command line is wrong
)

// Defaults of the persistent flags.
const (
	defaultEndpoint = "http://127.0.0.1:2379"
	defaultTimeout  = 5 * time.Second
)

// globalOptions are the persistent flags of the root command, shared by
// every command that talks to a registry.
type globalOptions struct {
	endpoints []string
	prefix    string
	timeout   time.Duration
	// TLS: the CA to trust, and the client certificate and key.
	cacert, cert, key string
	// user and password log in to etcd; user may be "name:password".
	user, password string
}

// validate checks the persistent flags; its errors are usage errors.
func (g *globalOptions) validate() error {
	var eps []string
	for _, ep := range g.endpoints {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return usageErrorf("--endpoints: need at least one etcd endpoint")
	}
	g.endpoints = eps
	if g.timeout <= 0 {
		return usageErrorf("--timeout: must be positive, got %v", g.timeout)
	}
	if g.prefix == "" || g.prefix == "/" {
		return usageErrorf("--prefix: must not be empty or \"/\"")
	}
	return g.validateSecurity()
}

// execute runs the muster command line args (without the program name)
// with ctx, writing to stdout and stderr, and returns the process exit
// code. Errors are reported on stderr, with the command's usage for usage
// errors.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		reportError(stderr, cmd, err)
	}
	return exitCode(err)
}

// newRootCmd builds the command tree. Each call returns a fresh tree with
// its own flag values, so tests can run commands in-process.
func newRootCmd() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "muster",
		Short: "Service registration and discovery for gRPC on etcd",
		Long: `Muster registers gRPC servers in etcd and lets clients discover them.

Start a registry with "muster serve", then look at it with "muster ls" and
"muster watch". Every command except serve talks to the etcd given by
--endpoints: over TLS for https:// endpoints (--cacert, --cert, --key), and
as the etcd user given by --user when etcd has authentication enabled.`,
		// Cobra reports errors and usage itself unless told not to; execute
		// does it, to choose the exit code.
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		// Runnable, so that an unknown command is an argument error rather
		// than a help screen with exit code 0.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return usageErrorf("%s", msg)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{err: err}
	})
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", []string{defaultEndpoint},
		"etcd endpoints, comma-separated")
	pf.StringVar(&g.prefix, "prefix", registry.DefaultPrefix,
		"key prefix under which services are registered")
	pf.DurationVar(&g.timeout, "timeout", defaultTimeout,
		"how long to wait for etcd before giving up")
	pf.StringVar(&g.cacert, "cacert", "",
		"verify etcd's certificate with this CA bundle (PEM) instead of the system's CAs")
	pf.StringVar(&g.cert, "cert", "",
		"client certificate (PEM) to present to etcd; needs --key")
	pf.StringVar(&g.key, "key", "",
		"private key (PEM) of --cert")
	pf.StringVar(&g.user, "user", "",
		"etcd user to log in as: user:password, or user with --password")
	pf.StringVar(&g.password, "password", "",
		"password of --user")

	root.AddCommand(
		newDemoCmd(),
		newServeCmd(),
		newLsCmd(g),
		newGetCmd(g),
		newWatchCmd(g),
		newDeregisterCmd(g),
		newDrainCmd(g),
		newUndrainCmd(g),
		newWeightCmd(g),
		newRegisterCmd(g),
		newXDSCmd(g),
		newXDSBootstrapCmd(),
		newConsoleCmd(g),
	)
	return root
}

// usageError is an error in the command line: an unknown command or flag,
// a wrong number of arguments, an invalid value. It makes the process exit
// with exitUsage, after the command's usage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitCode maps the error a command returned to the process exit code.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	default:
		return exitFailure
	}
}

// reportError writes err to w, followed by cmd's usage for a usage error.
func reportError(w io.Writer, cmd *cobra.Command, err error) {
	fmt.Fprintf(w, "muster: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) && cmd != nil {
		fmt.Fprintf(w, "\n%s", cmd.UsageString())
	}
}

// Argument validators returning usage errors.

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// serviceArg checks that args hold at most one (optional) or exactly one
// valid service name.
func serviceArg(optional bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) > 1:
			return usageErrorf("%s takes one service name, got %d arguments %q", cmd.CommandPath(), len(args), args)
		case len(args) == 0 && !optional:
			return usageErrorf("%s needs a service name", cmd.CommandPath())
		case len(args) == 1:
			if err := registry.ValidateName(args[0]); err != nil {
				var fe *registry.FieldError
				if errors.As(err, &fe) {
					return usageErrorf("invalid service name: %s", fe.Reason)
				}
				return &usageError{err: err}
			}
		}
		return nil
	}
}

// Output formats of --output.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// addOutputFlag adds --output (-o) to cmd, bound to *format.
func addOutputFlag(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVarP(format, "output", "o", outputTable, "output format: table or json")
}

func validateOutput(format string) error {
	switch format {
	case outputTable, outputJSON:
		return nil
	}
	return usageErrorf("--output: unknown format %q; want table or json", format)
}
