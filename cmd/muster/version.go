package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print muster's version and the Go version it was built with",
		Long: `Version prints the module version muster was built from, as in
"muster v1.2.0 (go1.26.0)", followed by the commit, its time and whether
the tree was modified when the build recorded them (go build in a checkout
of the repository does: its version is then a pseudo-version such as
v0.0.0-20261206013516-8d915aa7d72d).
"muster --version" prints the same.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
			return err
		},
	}
}

// buildVersion is the version line of this binary.
func buildVersion() string {
	info, _ := debug.ReadBuildInfo()
	return versionLine(info)
}

// versionLine is the version line for the build described by info, which
// may be nil (a binary built without module support).
func versionLine(info *debug.BuildInfo) string {
	version, goVersion, commit := "(devel)", runtime.Version(), ""
	if info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		commit = revision(info)
	}
	if commit == "" && version == "(devel)" {
		return fmt.Sprintf("muster (devel) (%s; no commit recorded: built with go run or -buildvcs=false)", goVersion)
	}
	return fmt.Sprintf("muster %s%s (%s)", version, commit, goVersion)
}

// revision returns " commit <hash> <time>", with "+modified" after the
// hash when the tree had uncommitted changes, when the build recorded the
// VCS revision (go build in a checkout does), else "".
func revision(info *debug.BuildInfo) string {
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = " " + s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		rev += "+modified"
	}
	return " commit " + rev + at
}
