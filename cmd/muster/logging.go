package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// logOptions are --log-format and --log-level, which every command takes
// (from $MUSTER_LOG_FORMAT and $MUSTER_LOG_LEVEL when the command line
// gives none).
type logOptions struct {
	format string // "text" or "json"
	level  string // a slog level ("debug", "info", "warn", "error"); "" for the command's own
	// out is the running command's stderr, for the logs of what is not
	// given a writer (the etcd client's certificate, read again); nil
	// before a command runs: those logs are dropped.
	out io.Writer
}

// addLogFlags adds the logging flags to root, for every command, and has
// them checked before any command runs.
func (l *logOptions) addLogFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&l.format, "log-format", "text", "format of the log lines on stderr: text or json (one JSON object a line) ($MUSTER_LOG_FORMAT)")
	f.StringVar(&l.level, "log-level", "", "least level of the log lines: debug, info, warn or error "+
		"(default: info for serve, xds, console and register; error for the others) ($MUSTER_LOG_LEVEL)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		l.out = cmd.ErrOrStderr()
		for _, name := range []string{"log-format", "log-level"} {
			fl := cmd.Flags().Lookup(name)
			if err := flagFromEnv(fl); err != nil {
				return err
			}
			if err := l.check(name); err != nil {
				if v, ok := os.LookupEnv(flagEnv(name)); ok && !fl.Changed {
					return usageErrorf("$%s=%q: %w", flagEnv(name), v, err)
				}
				return usageErrorf("--%s: %w", name, err)
			}
		}
		return nil
	}
}

// flagFromEnv sets fl from its environment variable (flagEnv) unless the
// command line set it; a value the flag refuses is a usage error naming
// the variable.
func flagFromEnv(fl *pflag.Flag) error {
	env := flagEnv(fl.Name)
	if fl.Changed || env == "" {
		return nil
	}
	v, ok := os.LookupEnv(env)
	if !ok {
		return nil
	}
	if err := fl.Value.Set(v); err != nil {
		return usageErrorf("$%s=%q: invalid value for --%s: %v", env, v, fl.Name, err)
	}
	return nil
}

// check checks the value of the logging flag name.
func (l logOptions) check(name string) error {
	switch name {
	case "log-format":
		if l.format != "text" && l.format != "json" {
			return fmt.Errorf("%q is not a log format: want text or json", l.format)
		}
	case "log-level":
		var lv slog.Level
		if l.level != "" && lv.UnmarshalText([]byte(l.level)) != nil {
			return fmt.Errorf("%q is not a level: want debug, info, warn or error", l.level)
		}
	}
	return nil
}

// logger returns a logger writing to w in the chosen format, from the
// chosen level or, when none was chosen, from def.
func (l logOptions) logger(w io.Writer, def slog.Level) *slog.Logger {
	level := def
	if l.level != "" {
		_ = level.UnmarshalText([]byte(l.level)) // checked before the command ran
	}
	if w == nil {
		w = io.Discard
	}
	o := &slog.HandlerOptions{Level: level}
	if l.format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
