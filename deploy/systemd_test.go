package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// unitEnvFiles maps each EnvironmentFile a unit names to the example of it
// in systemd/, with which the test expands the unit's command line.
var unitEnvFiles = map[string]string{
	"/etc/muster/muster.env":      "muster.env.example",
	"/etc/muster/xds.env":         "xds.env.example",
	"/etc/muster/console.env":     "console.env.example",
	"/etc/muster/register/%i.env": "register.env.example",
}

// installedBinary is the ExecStart path of the units.
const installedBinary = "/usr/local/bin/muster"

// Every unit in systemd/ passes systemd-analyze verify without a word
// (an unknown directive or a value systemd cannot parse is only a
// warning there: the test fails on any), and its command line, expanded
// with the example environment files, is one the muster command accepts;
// each MUSTER_* variable of those files is one the command reads.
func TestSystemdUnits(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "systemd")
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) != 3 {
		t.Fatalf("systemd/*.service: %v %v, want the three units", units, err)
	}
	bin := muster(t)
	dir := t.TempDir()
	for _, unit := range units {
		t.Run(filepath.Base(unit), func(t *testing.T) {
			text, err := os.ReadFile(unit)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(text, []byte("ExecStart="+installedBinary+" ")) {
				t.Fatalf("ExecStart does not run %s", installedBinary)
			}
			// systemd-analyze checks that ExecStart's program exists: the
			// copy runs the muster just built. A template is checked as
			// an instance of it.
			name := filepath.Base(unit)
			if strings.HasSuffix(name, "@.service") {
				name = strings.TrimSuffix(name, "@.service") + "@user.service"
			}
			copied := filepath.Join(dir, name)
			if err := os.WriteFile(copied, bytes.ReplaceAll(text, []byte(installedBinary), []byte(bin)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(analyze, "verify", "--man=no", copied).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
			}
			checkUnitCommand(t, string(text))
		})
	}
}

// checkUnitCommand checks the unit's ExecStart against the muster
// command: with the optional environment files absent and with every
// example present, the arguments parse, and each MUSTER_* variable of the
// examples is one the command's help names.
func checkUnitCommand(t *testing.T, unit string) {
	t.Helper()
	execStart := directive(t, unit, "ExecStart")
	if len(execStart) != 1 {
		t.Fatalf("ExecStart: %q, want one", execStart)
	}
	required, all := map[string]string{}, map[string]string{}
	for _, f := range directive(t, unit, "EnvironmentFile") {
		optional := strings.HasPrefix(f, "-")
		f = strings.TrimPrefix(f, "-")
		example, ok := unitEnvFiles[f]
		if !ok {
			t.Fatalf("EnvironmentFile=%s has no example in systemd/ (unitEnvFiles)", f)
		}
		vars := readEnvFile(t, filepath.Join("systemd", example))
		for k, v := range vars {
			all[k] = v
			if !optional {
				required[k] = v
			}
		}
	}
	for _, vars := range []map[string]string{required, all} {
		args := expandExec(t, execStart[0], vars)
		if len(args) < 2 || args[0] != installedBinary {
			t.Fatalf("ExecStart=%s: want %s and a command", execStart[0], installedBinary)
		}
		env := []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range vars {
			env = append(env, k+"="+v)
		}
		help := acceptsArgs(t, args[1:], env)
		if help == "" {
			continue // refused: said already
		}
		for k := range vars {
			if strings.HasPrefix(k, "MUSTER_") && !strings.Contains(help, "($"+k+")") {
				t.Errorf("%s: muster %s reads no $%s (its --help names the variables it reads)", strings.Join(args[1:], " "), args[1], k)
			}
		}
	}
}

// directive returns the values of key in the unit's text, in order.
func directive(t *testing.T, unit, key string) []string {
	t.Helper()
	var values []string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			if strings.HasSuffix(v, `\`) {
				t.Fatalf("%s= continues on the next line: the test reads single lines", key)
			}
			values = append(values, v)
		}
	}
	return values
}

// readEnvFile reads an environment file as systemd does for these
// examples: KEY=VALUE lines, comments and blank lines skipped. Quotes are
// refused: the examples need none.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(v, `"'\`) {
			t.Fatalf("%s: %q: want KEY=VALUE without quotes", path, line)
		}
		vars[k] = v
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return vars
}

// execVar is a variable in a command line: ${NAME}, one word, or $NAME,
// split at white space into words (systemd.service(5), "Command lines").
var execVar = regexp.MustCompile(`^\$(\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$`)

// expandExec splits an ExecStart value into words and expands its
// variables from vars, as systemd does for the forms the units use.
func expandExec(t *testing.T, line string, vars map[string]string) []string {
	t.Helper()
	if strings.ContainsAny(line, `"'\%`) {
		t.Fatalf("ExecStart=%s: quotes, escapes and specifiers are not read by the test", line)
	}
	var args []string
	for _, w := range strings.Fields(line) {
		m := execVar.FindStringSubmatch(w)
		switch {
		case m == nil && strings.Contains(w, "$"):
			t.Fatalf("ExecStart=%s: %q: a variable inside a word is not read by the test", line, w)
		case m == nil:
			args = append(args, w)
		case m[2] != "":
			args = append(args, vars[m[2]])
		default:
			args = append(args, strings.Fields(vars[m[3]])...)
		}
	}
	return args
}
