package main

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/cmd/muster/internal/demo"
)

func newDemoCmd() *cobra.Command {
	var (
		duration time.Duration
		backends int
		plain    bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show Muster at work: backends, faults and a live table, in about a minute",
		Long: `Demo starts an embedded etcd, greeter backends registered through
Muster's server package, and a client calling them through
muster:///greeter with the muster_p2c balancer (a few seconds). It then
plays a scenario: a backend turns slow, one crashes (its lease expires),
etcd stops and comes back, a new backend joins, one shuts down gracefully.
A table shows, every second, each backend's share of the calls that
succeeded and their latency (P50, P99; shown from 20 calls). At the end a
summary says whether each promise held; the exit code is 0 when all did, 1
when one did not.

Nothing needs to be installed or running. The table is redrawn in place on
a terminal and printed line by line otherwise (or with --plain).`,
		Example: `  muster demo
  muster demo --duration 30s --backends 4 --plain`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if duration < demo.MinDuration {
				return usageErrorf("--duration: %v is shorter than %v", duration, demo.MinDuration)
			}
			if backends < 3 {
				return usageErrorf("--backends: %d; the scenario needs at least 3", backends)
			}
			out := cmd.OutOrStdout()
			res, err := demo.Run(cmd.Context(), demo.Config{
				Duration:    duration,
				Backends:    backends,
				Out:         out,
				Interactive: !plain && isTerminal(out),
			})
			switch {
			case err != nil && cmd.Context().Err() != nil:
				return nil // interrupted
			case err != nil:
				return err
			case !res.OK():
				return errors.New("demo: a promise was broken (see the summary)")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", demo.DefaultDuration, "length of the scenario")
	f.IntVar(&backends, "backends", 3, "backends at the start (at least 3)")
	f.BoolVar(&plain, "plain", false, "print the table line by line even on a terminal")
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
