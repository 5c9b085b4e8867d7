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
"muster v1.2.0 (go1.26.0)". A binary built from a checkout of the repository
says "(devel)", followed by the commit when the build recorded one.
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
	version, goVersion := "(devel)", runtime.Version()
	if info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		if version == "(devel)" {
			version += revision(info)
		}
	}
	return fmt.Sprintf("muster %s (%s)", version, goVersion)
}

// revision returns " commit <hash>" (with "+dirty" for a modified tree)
// when the build recorded the VCS revision, else "".
func revision(info *debug.BuildInfo) string {
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return " commit " + rev
}
