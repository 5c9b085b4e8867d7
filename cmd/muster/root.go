package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/musterhq/muster/registry"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // the command line is wrong
)

// Defaults of the etcd flags.
const (
	defaultEndpoint = "http://127.0.0.1:2379"
	defaultTimeout  = 5 * time.Second
)

// globalOptions are the etcd flags, shared by every command that talks to
// a registry (see addFlags).
type globalOptions struct {
	// registry is --registry: "" for etcd at endpoints, or zk://... (zk.go).
	registry  string
	endpoints []string
	prefix    string
	timeout   time.Duration
	// TLS: the CA to trust, and the client certificate and key.
	cacert, cert, key string
	// user and password log in to etcd; user may be "name:password".
	// passwordFile names a file holding the password (--password-file).
	user, password, passwordFile string
	// clustered is set when the command reads several clusters
	// (--cluster): --endpoints is then not read, and the TLS flags are
	// checked against each cluster's endpoints instead.
	clustered bool
	// clusterName names the one cluster of several (--cluster, --in)
	// that a writing command acts on; empty without --cluster.
	clusterName string
	// log is --log-format and --log-level, which every command has.
	log logOptions
}

// validate checks the etcd flags; its errors are usage errors.
func (g *globalOptions) validate() error {
	if err := g.validateEndpoints(); err != nil {
		return err
	}
	if g.timeout <= 0 {
		return usageErrorf("--timeout: must be positive, got %v", g.timeout)
	}
	if g.prefix == "" || g.prefix == "/" {
		return usageErrorf("--prefix: must not be empty or \"/\"")
	}
	if g.clustered && g.registry != "" {
		return usageErrorf("--cluster names etcd clusters: not with --registry %s", g.registry)
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
"muster watch"; "muster doctor" checks a deployment. The commands that
operate on a registry (ls, get, watch, history, deregister, drain, undrain,
weight, canary, policy, register, xds, console, promsd, doctor) talk to the
etcd given by
--endpoints: over TLS for https:// endpoints (--cacert, --cert, --key), and
as the etcd user given by --user when etcd has authentication enabled.
With --registry zk://host:port,... ls, get, watch, drain, undrain, weight,
canary, policy, register and xds work on a ZooKeeper registry instead
(--prefix is its root path); history and deregister say what ZooKeeper
lacks for them.
Serve runs an etcd; demo runs its own; version and xds-bootstrap need none.`,
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
	root.SetFlagErrorFunc(flagError)
	g.log.addLogFlags(root)
	root.Version = buildVersion()
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(
		newDemoCmd(),
		newServeCmd(&g.log),
		newVersionCmd(),
		newXDSBootstrapCmd(),
	)
	// The commands that talk to a registry, and only they, take the etcd
	// flags. Those that work on the Store the flags name take ZooKeeper
	// too; the others (onStore false) work on etcd only.
	for _, c := range []struct {
		cmd     *cobra.Command
		onStore bool
	}{
		{newLsCmd(g), true},
		{newGetCmd(g), true},
		{newWatchCmd(g), true},
		{newHistoryCmd(g), true},
		{newDeregisterCmd(g), true},
		{newDrainCmd(g), true},
		{newUndrainCmd(g), true},
		{newWeightCmd(g), true},
		{newCanaryCmd(g), true},
		{newPolicyCmd(g), true},
		{newRegisterCmd(g), true},
		{newXDSCmd(g), true},
		{newConsoleCmd(g), false},
		{newPromSDCmd(g), false},
		{newDoctorCmd(g), false},
	} {
		g.addFlags(c.cmd)
		g.addRegistryFlag(c.cmd, c.onStore)
		root.AddCommand(c.cmd)
	}
	return root
}

// addFlags adds the flags that choose and reach the registry's etcd to
// cmd, and has cmd check them (validate) before it runs.
func (g *globalOptions) addFlags(cmd *cobra.Command) {
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := flagsFromEnv(cmd); err != nil {
			return err
		}
		if f := cmd.Flags().Lookup("cluster"); f != nil && f.Changed {
			g.clustered = true
		}
		return g.validate()
	}
	cmd.SetUsageFunc(usageWithEtcdFlags)
	f := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	f.StringSliceVar(&g.endpoints, "endpoints", []string{defaultEndpoint},
		"etcd endpoints, comma-separated: http://host:port, https://host:port, or host:port (meaning http://)")
	f.StringVar(&g.prefix, "prefix", registry.DefaultPrefix,
		"key prefix under which services are registered")
	f.DurationVar(&g.timeout, "timeout", defaultTimeout,
		"how long to wait for etcd before giving up")
	f.StringVar(&g.cacert, "cacert", "",
		"verify etcd's certificate with this CA bundle (PEM) instead of the system's CAs")
	f.StringVar(&g.cert, "cert", "",
		"client certificate (PEM) to present to etcd; needs --key; read again when it changes (the next connection presents the new one)")
	f.StringVar(&g.key, "key", "",
		"private key (PEM) of --cert")
	f.StringVar(&g.user, "user", "",
		"etcd user to log in as: user, with its password in --password-file or $"+passwordEnv+" (or user:password, or --password, which other users of the machine can read in the process list)")
	f.StringVar(&g.password, "password", "",
		"password of --user (visible in the process list: prefer --password-file or $"+passwordEnv+")")
	f.StringVar(&g.passwordFile, "password-file", "",
		"file holding the password of --user (its first line); read again when the client logs in again (a password changed in etcd and in the file is used without a restart)")
	f.VisitAll(func(fl *pflag.Flag) {
		fl.Annotations = map[string][]string{etcdFlagAnnotation: nil}
		if env := flagEnv(fl.Name); env != "" {
			fl.Usage += " ($" + env + ")"
		}
	})
	cmd.Flags().AddFlagSet(f)
}

// flagEnv is the environment variable an etcd flag (or --registry) takes
// its value from when the command line does not give it, as etcdctl's
// ETCDCTL_*: MUSTER_ENDPOINTS for --endpoints, MUSTER_PASSWORD_FILE for
// --password-file. "" for --password, whose variable ($MUSTER_PASSWORD)
// stands for it when no flag gives a password at all (security.go).
func flagEnv(name string) string {
	if name == "password" {
		return ""
	}
	return "MUSTER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagsFromEnv sets each etcd flag of cmd (and --registry) that the
// command line left alone from its environment variable (flagEnv), when
// set: flags win. A value the flag refuses is a usage error naming the
// variable.
func flagsFromEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		_, etcdFlag := fl.Annotations[etcdFlagAnnotation]
		if err == nil && (etcdFlag || fl.Name == "registry") {
			err = flagFromEnv(fl)
		}
	})
	return err
}

// etcdFlagAnnotation marks the etcd flags, which usage lists apart.
const etcdFlagAnnotation = "muster_etcd_flag"

// usageWithEtcdFlags writes cmd's usage as cobra does for a command
// without subcommands, with the etcd flags in a section of their own
// after the command's own flags, and then the flags every command has.
func usageWithEtcdFlags(cmd *cobra.Command) error {
	own := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	etcd := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[etcdFlagAnnotation]; ok {
			etcd.AddFlag(f)
		} else {
			own.AddFlag(f)
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s\n", cmd.UseLine())
	if cmd.HasExample() {
		fmt.Fprintf(&b, "\nExamples:\n%s\n", cmd.Example)
	}
	fmt.Fprintf(&b, "\nFlags:\n%s", own.FlagUsages())
	fmt.Fprintf(&b, "\nEtcd flags (which registry, and how to reach it):\n%s", etcd.FlagUsages())
	if cmd.HasAvailableInheritedFlags() {
		fmt.Fprintf(&b, "\nGlobal Flags:\n%s", cmd.InheritedFlags().FlagUsages())
	}
	_, err := io.WriteString(cmd.OutOrStderr(), b.String())
	return err
}

// usageError is an error in the command line: an unknown command or flag,
// a wrong number of arguments, an invalid value. It makes the process exit
// with exitUsage, after a line naming the command's help.
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

// reportError writes err to w, followed for a usage error by one line
// naming the help of cmd: the error says what is wrong, the help the rest.
func reportError(w io.Writer, cmd *cobra.Command, err error) {
	fmt.Fprintf(w, "muster: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) && cmd != nil {
		fmt.Fprintf(w, "see '%s --help'\n", cmd.CommandPath())
	}
}

// flagError turns a flag parsing error into a usage error. A negative
// number is not an unknown flag but a value out of range: the error says
// so, with the weight rule for the weight command.
func flagError(cmd *cobra.Command, err error) error {
	// pflag's error for an argument such as -1, which it takes for a
	// shorthand flag.
	negative := regexp.MustCompile(`^unknown shorthand flag: '.' in (-[0-9][0-9.]*)$`)
	m := negative.FindStringSubmatch(err.Error())
	switch {
	case m == nil:
		return &usageError{err: err}
	case cmd.Name() == "weight":
		return weightError("weight", m[1])
	default:
		return usageErrorf("%s: a negative number is not a valid argument of %s (if it is an instance ID, put -- before it)", m[1], cmd.CommandPath())
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
