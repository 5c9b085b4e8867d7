package readme_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's lines that build the muster command in a module that
// depends on Muster.
var buildCommand = []string{
	"go get github.com/musterhq/muster/cmd/muster",
	"go build -o muster github.com/musterhq/muster/cmd/muster",
}

// TestREADMEBuildsTheCommandFromAModule: in a module of a user's that
// depends on Muster (through a replace directive, as the README says),
// building the command fails for want of its own dependencies' go.sum
// entries (cobra) until the README's go get adds them; then it builds.
// The build is a dry run (-n): it loads every package as a build does.
func TestREADMEBuildsTheCommandFromAModule(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range buildCommand {
		if !strings.Contains(string(readme), "\n"+line) {
			t.Fatalf("README.md does not show the line %q", line)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/app\n\ngo 1.26.0\n")
	write("main.go", "package main\n\nimport _ \"github.com/musterhq/muster/resolver\"\n\nfunc main() {}\n")
	// Offline: the module cache holds what Muster's own build needs.
	env := append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=", "GOWORK=off")
	goCmd := func(args ...string) (string, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, args := range [][]string{
		{"mod", "edit", "-replace", "github.com/musterhq/muster=" + root},
		{"get", "github.com/musterhq/muster"},
	} {
		if out, err := goCmd(args...); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	build := []string{"build", "-n", "-o", filepath.Join(dir, "muster"), "github.com/musterhq/muster/cmd/muster"}
	if out, err := goCmd(build...); err == nil || !strings.Contains(out, "missing go.sum entry") {
		t.Fatalf("go build of the command before go get: %v\n%s\nwant the missing go.sum entry the README explains", err, out)
	}
	if out, err := goCmd(strings.Fields(buildCommand[0])[1:]...); err != nil {
		t.Fatalf("%s: %v\n%s", buildCommand[0], err, out)
	}
	if out, err := goCmd(build...); err != nil {
		t.Fatalf("go build of the command after %s: %v\n%s", buildCommand[0], err, out)
	}
}
