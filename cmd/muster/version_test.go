package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := runOK(t, args...)
		if !strings.HasPrefix(r.stdout, "muster ") || !strings.Contains(r.stdout, "(go1.") || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("muster %s printed %q; want one line \"muster <version> (go...)\"", args[0], r.stdout)
		}
	}
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "muster (devel) (" + runtime.Version() + ")"},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.2.0"}}, "muster v1.2.0 (go1.26.1)"},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
		}}, "muster (devel) commit 0123456789ab+dirty (go1.26.1)"},
	} {
		if got := versionLine(c.info); got != c.want {
			t.Errorf("versionLine = %q, want %q", got, c.want)
		}
	}
}
