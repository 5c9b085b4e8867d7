package main

import (
	"fmt"
	"io"
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
says "(devel)", followed by the commit when the build recorded one.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, _ := debug.ReadBuildInfo()
			return writeVersion(cmd.OutOrStdout(), info)
		},
	}
}

// writeVersion writes the version line for the build described by info,
// which may be nil (a binary built without module support).
func writeVersion(w io.Writer, info *debug.BuildInfo) error {
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
	_, err := fmt.Fprintf(w, "muster %s (%s)\n", version, goVersion)
	return err
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
