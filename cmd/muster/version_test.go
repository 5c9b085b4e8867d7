package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
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
		{nil, "muster (devel) (" + runtime.Version() + "; no commit recorded: built with go run or -buildvcs=false)"},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.2.0"}}, "muster v1.2.0 (go1.26.1)"},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
		}}, "muster (devel) commit 0123456789ab+modified (go1.26.1)"},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.0.0-20261206013516-0123456789ab"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-06T01:35:16Z"}, {Key: "vcs.modified", Value: "false"},
		}}, "muster v0.0.0-20261206013516-0123456789ab commit 0123456789ab 2026-12-06T01:35:16Z (go1.26.1)"},
	} {
		if got := versionLine(c.info); got != c.want {
			t.Errorf("versionLine = %q, want %q", got, c.want)
		}
	}
}

// The command built as a user builds it from a checkout of the repository
// (go build, which records the commit unless told not to) says which
// commit and when.
func TestVersionFromCheckout(t *testing.T) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	head := strings.TrimSpace(string(out))
	bin := filepath.Join(t.TempDir(), "muster")
	args := []string{"build", "-buildvcs=true", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	// Whether the tree is modified may change while other packages' tests
	// run in it: either is right here (TestVersion checks the words).
	re := regexp.MustCompile(`^muster v0\.0\.0-\d{14}-` + head[:12] + `\S* commit ` + head[:12] + `(\+modified)? \d{4}-\d\d-\d\dT\S+ \(go1\.`)
	if line := string(out); !re.MatchString(line) {
		t.Errorf("muster version built from commit %s: %q; want its pseudo-version, commit and time", head, line)
	}
}
