package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestExitCode(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{usageErrorf("bad flag"), 2},
		{fmt.Errorf("wrapped: %w", usageErrorf("bad flag")), 2},
		{errors.New("etcd said no"), 1},
		{&unreachableError{endpoints: []string{"http://x:1"}, err: errors.New("no answer")}, 1},
		{errInterrupted, 1},
	}
	for _, c := range cases {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	// All are found before etcd is contacted, so they fail at once.
	cases := []struct {
		args []string
		msg  string // in the error line
	}{
		{[]string{"ls", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"ls", "-x"}, "unknown shorthand flag: 'x'"},
		{[]string{"ls", "a", "b"}, "takes one service name"},
		{[]string{"ls", "User"}, `invalid service name: "User" must start with a lower-case letter or digit`},
		{[]string{"ls", "a/b"}, "allowed are a-z"},
		{[]string{"ls", "-o", "yaml"}, `unknown format "yaml"`},
		{[]string{"ls", "--timeout", "soon"}, `invalid argument "soon"`},
		{[]string{"ls", "--timeout", "0s"}, "--timeout: must be positive"},
		{[]string{"ls", "--endpoints", ""}, "--endpoints: need at least one"},
		{[]string{"ls", "--prefix", "/"}, "--prefix"},
		{[]string{"watch"}, "needs a service name"},
		{[]string{"watch", "a", "b"}, "takes one service name"},
		{[]string{"watch", "user", "--output", "xml"}, `unknown format "xml"`},
		{[]string{"serve", "extra"}, "takes no arguments"},
		// Every URL flag takes the same forms, checked before any wait,
		// and the error names the mistake.
		{[]string{"ls", "--endpoints", "ftp://127.0.0.1:2379"}, `--endpoints "ftp://127.0.0.1:2379": unknown scheme "ftp"; want http://host:port, https://host:port or host:port`},
		{[]string{"ls", "--endpoints", "http://127.0.0.1"}, `--endpoints "http://127.0.0.1": no port`},
		{[]string{"ls", "--endpoints", "127.0.0.1:99999"}, `--endpoints "127.0.0.1:99999": port "99999" is not a number 1..65535`},
		{[]string{"ls", "--endpoints", "http://127.0.0.1:2379/v3"}, `a path, query or fragment is not allowed`},
		{[]string{"ls", "--endpoints", "http://root:pw@127.0.0.1:2379"}, `no user in the URL; give it with --user`},
		{[]string{"ls", "--endpoints", "http://:2379"}, `--endpoints "http://:2379": no host`},
		{[]string{"ls", "--endpoints", "h:1,ftp://h:2"}, `--endpoints "ftp://h:2": unknown scheme`},
		{[]string{"ls", "--cacert", "ca.pem", "--endpoints", "h:1"}, "need https:// endpoints; http://h:1 is plain http"},
		// xds checks the etcd flags as the other commands do.
		{[]string{"xds", "--endpoints", "ftp://h:1"}, `--endpoints "ftp://h:1": unknown scheme "ftp"`},
		{[]string{"xds", "--cert", "c.pem"}, "--cert and --key go together"},
		{[]string{"serve", "--listen-client-url", "ftp://127.0.0.1:2379"}, `--listen-client-url "ftp://127.0.0.1:2379": unknown scheme "ftp"`},
		{[]string{"serve", "--listen-client-url", "https://127.0.0.1:2379"}, "--listen-client-url https://127.0.0.1:2379: https needs --cert-file and --key-file"},
		{[]string{"serve", "--listen-peer-url", "127.0.0.1"}, `--listen-peer-url "127.0.0.1": no port`},
		{[]string{"serve", "--listen-client-url", "127.0.0.1:2380"}, "--listen-client-url and --listen-peer-url must differ"},
		{[]string{"serve", "--listen-peer-url", "http://example.com:2380"}, "IP address or localhost"},
		{[]string{"serve", "--data-dir", ""}, "--data-dir"},
		{[]string{"serve", "--quota-backend-bytes", "-1"}, "--quota-backend-bytes -1: want 0 (etcd's default, 2 GiB) or more"},
		// The embedded etcd has no TLS nor auth: loopback only, unless
		// the operator says the network is trusted.
		{[]string{"serve", "--listen-client-url", "http://0.0.0.0:2379"}, "--listen-client-url http://0.0.0.0:2379: other hosts would reach the embedded etcd in plain text"},
		{[]string{"serve", "--listen-peer-url", "http://10.1.2.3:2380"}, "--listen-peer-url http://10.1.2.3:2380: other hosts would reach the embedded etcd's peer port without peer certificates"},
		{[]string{"serve", "--listen-client-url", "[::]:2379"}, "--insecure-listen-anywhere"},
		{[]string{"lss"}, `unknown command "lss" for "muster"; did you mean ls or xds?`},
		// A negative number is a value out of range, not a flag.
		{[]string{"weight", "user", "a", "-1"}, "weight -1: want a whole number 0..10000 (0 drains"},
		{[]string{"weight", "user", "a", "--", "-1"}, "weight -1: want a whole number 0..10000 (0 drains"},
		{[]string{"weight", "user", "a", "10001"}, "weight 10001: want a whole number 0..10000 (0 drains"},
		{[]string{"drain", "user", "-3"}, "-3: a negative number is not a valid argument of muster drain"},
		// One weight rule, one message, on every command.
		{[]string{"register", "--name", "x", "--addr", "h:1", "--weight", "-5"}, "--weight -5: want a whole number 0..10000 (0 drains"},
		{[]string{"register", "--name", "x", "--addr", "h:1", "--weight", "10001"}, "--weight 10001: want a whole number 0..10000 (0 drains"},
		{[]string{"register", "--name", "x", "--addr", "h:1", "--weight", "heavy"}, "--weight heavy: want a whole number 0..10000 (0 drains"},
		// The rule broken, not every rule.
		{[]string{"register", "--name", "x", "--addr", "h:1", "--ttl", "100ms"}, "--ttl 100ms: must be at least 1s"},
		{[]string{"register", "--name", "x", "--addr", "h:1", "--interval", "0s"}, "--interval 0s: must be positive"},
		{[]string{"register", "--name", "x", "--addr", "h:1", "--failures", "0"}, "--failures 0: must be at least 1"},
		// The etcd flags belong to the commands that talk to etcd.
		{[]string{"demo", "--endpoints", "http://h:1"}, "unknown flag: --endpoints"},
		{[]string{"version", "--timeout", "1s"}, "unknown flag: --timeout"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := run(c.args...)
			if r.code != exitUsage {
				t.Fatalf("exit code %d, want %d\nstderr:\n%s", r.code, exitUsage, r.stderr)
			}
			first, rest, _ := strings.Cut(r.stderr, "\n")
			if !strings.HasPrefix(first, "muster: ") || !strings.Contains(first, c.msg) {
				t.Fatalf("first stderr line %q, want \"muster: ...%s...\"", first, c.msg)
			}
			// The error and one line naming the help, not the usage.
			if !regexp.MustCompile(`^see 'muster( [a-z-]+)? --help'\n$`).MatchString(rest) {
				t.Fatalf("after the error, stderr has %q; want one line \"see 'muster ... --help'\"", rest)
			}
			if r.stdout != "" {
				t.Fatalf("stdout should be empty, got %q", r.stdout)
			}
			if r.took > 2*time.Second {
				t.Fatalf("a usage error took %v", r.took)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"--help"}, {"help"}, {"ls", "-h"}, {"help", "serve"}} {
		r := run(args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Errorf("muster %v: exit code %d, stdout %q, stderr %q; want help on stdout and exit 0",
				args, r.code, r.stdout, r.stderr)
		}
	}
	r := run("serve", "--help")
	for _, want := range []string{"--data-dir", "$XDG_STATE_HOME/muster/etcd", "~/.local/state/muster/etcd", "--listen-client-url", "http://127.0.0.1:2379", "--listen-peer-url", "--name"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve --help does not mention %q:\n%s", want, r.stdout)
		}
	}
}

// Commands that do not talk to etcd do not list the etcd flags; those
// that do list them, with the endpoint forms they accept.
func TestHelpEtcdFlags(t *testing.T) {
	for _, cmd := range []string{"demo", "version", "serve", "xds-bootstrap"} {
		r := run(cmd, "--help")
		for _, flag := range []string{"--endpoints", "--cacert", "--user", "--timeout"} {
			if regexp.MustCompile(`(?m)^\s+` + flag + ` `).MatchString(r.stdout) {
				t.Errorf("%s --help lists %s:\n%s", cmd, flag, r.stdout)
			}
		}
	}
	for _, cmd := range []string{"ls", "get", "watch", "deregister", "drain", "undrain", "weight", "canary", "policy", "register", "xds"} {
		r := run(cmd, "--help")
		if !strings.Contains(r.stdout, "--endpoints") || !strings.Contains(r.stdout, "host:port (meaning http://)") {
			t.Errorf("%s --help does not describe --endpoints:\n%s", cmd, r.stdout)
		}
		// In a section of their own, after the command's flags.
		_, etcdSection, ok := strings.Cut(r.stdout, "\nEtcd flags")
		_, flags, _ := strings.Cut(r.stdout, "\nFlags:\n")
		flags, _, _ = strings.Cut(flags, "\nEtcd flags")
		if !ok || !strings.Contains(etcdSection, "--cacert") || strings.Contains(flags, "--cacert") || !strings.Contains(flags, "--help") {
			t.Errorf("%s --help does not list the etcd flags apart, after its own:\n%s", cmd, r.stdout)
		}
	}
}

// The help of drain and weight says which balancers follow weights, and
// what holds through xDS.
func TestHelpWeights(t *testing.T) {
	for _, cmd := range []string{"drain", "weight"} {
		r := run(cmd, "--help")
		for _, want := range []string{"muster_p2c", "muster_wrr", "round_robin", "ignore weights", "DRAINING", "every xDS client"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s --help does not mention %q:\n%s", cmd, want, r.stdout)
			}
		}
	}
}

func TestFormatAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                 "0s",
		0:                            "0s",
		42 * time.Second:             "42s",
		119 * time.Second:            "119s",
		2 * time.Minute:              "2m",
		119 * time.Minute:            "119m",
		3 * time.Hour:                "3h",
		47 * time.Hour:               "47h",
		49 * time.Hour:               "2d",
		400*24*time.Hour + time.Hour: "400d",
	} {
		if got := formatAge(d); got != want {
			t.Errorf("formatAge(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestFormatMetadataQuotes(t *testing.T) {
	got := formatMetadata(map[string]string{"b": "x y", "a": "1", "c": "k=v,w", "d": "tab\there"})
	want := `a=1,b="x y",c="k=v,w",d="tab\there"`
	if got != want {
		t.Fatalf("formatMetadata = %s, want %s", got, want)
	}
}

// The etcd flags take their values from MUSTER_* variables when the
// command line does not give them; a flag given wins, a bad value is a
// usage error naming the variable, and --help names the variables.
func TestFlagsFromEnvironment(t *testing.T) {
	f := newLsFixture(t)
	t.Setenv("MUSTER_ENDPOINTS", f.endpoint)
	if r := runOK(t, "ls"); !strings.Contains(r.stdout, "user-admin") {
		t.Fatalf("ls with $MUSTER_ENDPOINTS:\n%s", r.stdout)
	}
	t.Setenv("MUSTER_PREFIX", "/elsewhere")
	if r := runOK(t, "ls", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("ls with $MUSTER_PREFIX=/elsewhere printed %q, want no service", r.stdout)
	}
	if r := runOK(t, "ls", "--prefix", "/muster/services"); !strings.Contains(r.stdout, "user-admin") {
		t.Fatalf("ls --prefix over $MUSTER_PREFIX:\n%s", r.stdout)
	}
	t.Setenv("MUSTER_TIMEOUT", "soon")
	if r := run("ls"); r.code != exitUsage || !strings.Contains(r.stderr, "$MUSTER_TIMEOUT") {
		t.Fatalf("ls with $MUSTER_TIMEOUT=soon: exit %d, stderr %q; want a usage error naming the variable", r.code, r.stderr)
	}
	if r := run("ls", "--help"); !strings.Contains(r.stdout+r.stderr, "($MUSTER_ENDPOINTS)") {
		t.Fatalf("ls --help does not name $MUSTER_ENDPOINTS:\n%s", r.stdout+r.stderr)
	}
}
