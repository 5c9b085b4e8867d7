package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/musterhq/muster/internal/testkit/testbackend"
)

// The logging flags are checked before a command runs, from the command
// line or their variables, and name what is wrong.
func TestLogFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"ls", "--log-format", "xml"}, nil, `--log-format: "xml" is not a log format: want text or json`},
		{[]string{"xds-bootstrap", "--log-level", "loud"}, nil, `--log-level: "loud" is not a level`},
		{[]string{"ls"}, map[string]string{"MUSTER_LOG_FORMAT": "yaml"}, `$MUSTER_LOG_FORMAT="yaml": "yaml" is not a log format`},
		{[]string{"serve"}, map[string]string{"MUSTER_LOG_LEVEL": "chatty"}, `$MUSTER_LOG_LEVEL="chatty": "chatty" is not a level`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := run(tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("muster %v with %v: exit %d, stderr %q; want exit %d and %q", tc.args, tc.env, r.code, r.stderr, exitUsage, tc.want)
			}
		})
	}
}

// With --log-format json every line the long-running commands log is one
// JSON object with time, level and msg; --log-level debug shows the lines
// below info, and $MUSTER_LOG_FORMAT chooses the format as the flag does.
func TestJSONLogs(t *testing.T) {
	s := startServe(t, t.TempDir())
	be := testbackend.Start(t)
	side := startReading(t, false, "register", "--log-format", "json", "--log-level", "debug", "--endpoints", s.endpoint,
		"--name", "greeter", "--addr", be.Addr, "--check", "grpc://"+be.Addr, "--interval", "100ms")
	waitLogged(t, side.stderr, `"msg":"(registered)"`)
	cp := startReading(t, false, "xds", "--log-format", "json", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0",
		"--services", "greeter", "--metrics-listen", "127.0.0.1:0")
	waitLogged(t, cp.stderr, `"msg":"(xds control plane serving ADS)`)
	t.Setenv("MUSTER_LOG_FORMAT", "json")
	con := startReading(t, false, "console", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0")
	waitLogged(t, con.stderr, `"msg":"(console) on`)
	reg := startReading(t, false, "serve", "--data-dir", t.TempDir(), "--listen-client-url", freeLoopbackURLs(t, 1)[0],
		"--listen-peer-url", freeLoopbackURLs(t, 1)[0], "--metrics-listen", "127.0.0.1:0")
	waitLogged(t, reg.stderr, `"msg":"(ready)`)
	for name, b := range map[string]*background{"register": side, "xds": cp, "console": con, "serve": reg} {
		b.stop(t)
		debug := false
		for _, line := range strings.Split(strings.TrimSpace(b.stderr.String()), "\n") {
			var v struct{ Time, Level, Msg string }
			if err := json.Unmarshal([]byte(line), &v); err != nil || v.Time == "" || v.Level == "" || v.Msg == "" {
				t.Errorf("muster %s: a log line that is not a JSON object with time, level and msg (%v):\n%s", name, err, line)
			}
			debug = debug || v.Level == "DEBUG"
		}
		if name == "register" && !debug {
			t.Errorf("muster register --log-level debug logged no debug line:\n%s", b.stderr.String())
		}
	}
}
