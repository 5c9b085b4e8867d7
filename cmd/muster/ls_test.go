package main

import (
	"encoding/json"
	"net"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// fixClock makes the commands' clock return now for the rest of the test.
func fixClock(t *testing.T, now time.Time) {
	old := timeNow
	timeNow = func() time.Time { return now }
	t.Cleanup(func() { timeNow = old })
}

// lsFixture is a registry with two services and some bad values.
type lsFixture struct {
	endpoint string
	now      time.Time
}

func newLsFixture(t *testing.T) lsFixture {
	t.Helper()
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	fixClock(t, now)
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)
	register(t, r, registry.Instance{
		ID: "user-1", Name: "user", Version: "v1.4.2", Addr: "10.0.0.1:9000", Zone: "eu-1a", Region: "eu-1",
		Weight: 250, Metadata: map[string]string{"tier": "gold", "color": "blue"},
		RegisteredAt: now.Add(-3 * time.Hour),
	})
	register(t, r, registry.Instance{
		ID: "user-2", Name: "user", Addr: "10.0.0.2:9000", Draining: true,
		RegisteredAt: now.Add(-42 * time.Second),
	})
	register(t, r, registry.Instance{Name: "billing", Addr: "10.0.1.1:7000", RegisteredAt: now.Add(-5 * time.Minute)})
	register(t, r, registry.Instance{Name: "user-admin", Addr: "10.0.2.1:7000", RegisteredAt: now})
	// Values clients skip: a future schema under user, garbage as the only
	// value of "broken".
	cli := newClient(t, s.endpoint)
	putRaw(t, cli, "/muster/services/user/user-9", `{"v":2,"id":"user-9","name":"user","addr":"10.0.0.9:9000"}`)
	putRaw(t, cli, "/muster/services/broken/b-1", "not json")
	return lsFixture{endpoint: s.endpoint, now: now}
}

func TestLs(t *testing.T) {
	f := newLsFixture(t)

	t.Run("services table", func(t *testing.T) {
		r := runOK(t, "ls", "--endpoints", f.endpoint)
		want := "" +
			"SERVICE     INSTANCES  CANARY\n" +
			"billing     1          -\n" +
			"broken      0          -\n" +
			"user        2          -\n" +
			"user-admin  1          -\n"
		if r.stdout != want {
			t.Fatalf("ls stdout:\n%s\nwant:\n%s", r.stdout, want)
		}
		for _, key := range []string{"/muster/services/user/user-9", "/muster/services/broken/b-1"} {
			if !strings.Contains(r.stderr, "skipping bad registry value") || !strings.Contains(r.stderr, key) {
				t.Errorf("stderr does not report the skipped value %s:\n%s", key, r.stderr)
			}
		}
	})

	t.Run("services json", func(t *testing.T) {
		r := runOK(t, "ls", "--endpoints", f.endpoint, "-o", "json")
		var got []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("ls -o json printed invalid JSON: %v\n%s", err, r.stdout)
		}
		want := []map[string]any{
			{"name": "billing", "instances": 1.0},
			{"name": "broken", "instances": 0.0},
			{"name": "user", "instances": 2.0},
			{"name": "user-admin", "instances": 1.0},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ls -o json = %v, want %v", got, want)
		}
	})

	t.Run("instances table", func(t *testing.T) {
		r := runOK(t, "ls", "user", "--endpoints", f.endpoint)
		want := "" +
			"ID      ADDR           VERSION  ZONE   REGION  COLOR  WEIGHT  METADATA              AGE\n" +
			"user-1  10.0.0.1:9000  v1.4.2   eu-1a  eu-1    blue   250     color=blue,tier=gold  3h\n" +
			"user-2  10.0.0.2:9000  -        -      -       -      0       -                     42s\n"
		if r.stdout != want {
			t.Fatalf("ls user stdout:\n%s\nwant:\n%s", r.stdout, want)
		}
		if !strings.Contains(r.stderr, "/muster/services/user/user-9") {
			t.Errorf("stderr does not report the skipped value user-9:\n%s", r.stderr)
		}
	})

	t.Run("instances json", func(t *testing.T) {
		r := runOK(t, "ls", "user", "--endpoints", f.endpoint, "--output", "json")
		var got []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("ls user -o json printed invalid JSON: %v\n%s", err, r.stdout)
		}
		want := []map[string]any{
			{
				"v": 1.0, "id": "user-1", "name": "user", "version": "v1.4.2", "addr": "10.0.0.1:9000",
				"zone": "eu-1a", "region": "eu-1", "weight": 250.0, "metadata": map[string]any{"color": "blue", "tier": "gold"},
				"registered_at": f.now.Add(-3 * time.Hour).Format(time.RFC3339Nano),
			},
			{
				"v": 1.0, "id": "user-2", "name": "user", "addr": "10.0.0.2:9000", "weight": 0.0,
				"registered_at": f.now.Add(-42 * time.Second).Format(time.RFC3339Nano),
			},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ls user -o json =\n%v\nwant\n%v", got, want)
		}
		// Each element decodes as a stored value.
		var raws []json.RawMessage
		_ = json.Unmarshal([]byte(r.stdout), &raws)
		for _, raw := range raws {
			if _, err := registry.Unmarshal(raw); err != nil {
				t.Errorf("element %s is not a valid stored value: %v", raw, err)
			}
		}
	})

	t.Run("empty service", func(t *testing.T) {
		r := runOK(t, "ls", "nothing-here", "--endpoints", f.endpoint)
		if r.stdout != "" || r.stderr != "no instances of nothing-here\n" {
			t.Fatalf("ls of an unknown service: stdout %q, stderr %q", r.stdout, r.stderr)
		}
		r = runOK(t, "ls", "nothing-here", "--endpoints", f.endpoint, "-o", "json")
		if r.stdout != "[]\n" {
			t.Fatalf("ls -o json of an unknown service printed %q, want []", r.stdout)
		}
	})

	t.Run("other prefix", func(t *testing.T) {
		r := runOK(t, "ls", "--endpoints", f.endpoint, "--prefix", "/elsewhere", "-o", "json")
		if r.stdout != "[]\n" {
			t.Fatalf("ls under an empty prefix printed %q, want []", r.stdout)
		}
	})
}

// deadEndpoint returns an http URL of a loopback port nothing listens on.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "http://" + ln.Addr().String()
	ln.Close()
	return ep
}

func TestUnreachableEtcdFailsWithinTimeout(t *testing.T) {
	ep := deadEndpoint(t)
	for _, args := range [][]string{
		{"ls"},
		{"ls", "user"},
		{"watch", "user"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := run(append(args, "--endpoints", ep, "--timeout", "1s")...)
			if r.code != exitFailure {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", r.code, exitFailure, r.stderr)
			}
			// The reason no connection could be made follows.
			want := regexp.MustCompile(`^muster: cannot reach etcd at ` + regexp.QuoteMeta(ep) +
				`: no answer within 1s; last connection error: .*connection refused\n$`)
			if !want.MatchString(r.stderr) {
				t.Fatalf("stderr:\n%q\nwant a match for:\n%s", r.stderr, want)
			}
			if r.stdout != "" {
				t.Fatalf("stdout should be empty, got %q", r.stdout)
			}
			if r.took > 3*time.Second {
				t.Fatalf("took %v with --timeout 1s", r.took)
			}
		})
	}
}

// Tables show every instance's ID, also one that is its address, and
// mark a weight set by an operator's override; watch names an instance by
// its address alone when that is its ID.
func TestTablesShowOverridesAndIDs(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	fixClock(t, now)
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)
	register(t, r, registry.Instance{Name: "user", Addr: "10.0.0.1:9000", RegisteredAt: now.Add(-time.Minute)})
	register(t, r, registry.Instance{Name: "user", ID: "b", Addr: "10.0.0.2:9000", RegisteredAt: now.Add(-time.Minute)})
	ep := []string{"--endpoints", s.endpoint}

	w := start(t, append([]string{"watch", "user"}, ep...)...)
	w.expectWatch(t, `# user: 2 instances at revision \d+; watching for changes`)
	w.expectWatch(t, `= 10\.0\.0\.1:9000 \(weight 100\)`)
	w.expectWatch(t, `= b 10\.0\.0\.2:9000 \(weight 100\)`)

	runOK(t, append([]string{"weight", "user", "b", "250"}, ep...)...)
	w.expectWatch(t, `~ b 10\.0\.0\.2:9000 \(weight 100->250 by override\)`)
	runOK(t, append([]string{"drain", "user", "10.0.0.1:9000"}, ep...)...)
	w.expectWatch(t, `~ 10\.0\.0\.1:9000 \(weight 100->0 by override\)`)

	// An instance whose ID is its address (the default) shows it in the
	// ID column too: operators name instances by ID.
	want := "" +
		"ID             ADDR           VERSION  ZONE  REGION  COLOR  WEIGHT  METADATA  AGE\n" +
		"10.0.0.1:9000  10.0.0.1:9000  -        -     -       -      0*      -         60s\n" +
		"b              10.0.0.2:9000  -        -     -       -      250*    -         60s\n" +
		overrideNote + "\n"
	if got := runOK(t, append([]string{"ls", "user"}, ep...)...); got.stdout != want {
		t.Fatalf("ls user:\n%s\nwant:\n%s", got.stdout, want)
	}

	runOK(t, append([]string{"undrain", "user", "b"}, ep...)...)
	w.expectWatch(t, `~ b 10\.0\.0\.2:9000 \(weight 250->100, override removed\)`)
	want = "" +
		"ID  ADDR           VERSION  ZONE  REGION  COLOR  WEIGHT  METADATA  AGE\n" +
		"b   10.0.0.2:9000  -        -     -       -      100     -         60s\n"
	if got := runOK(t, append([]string{"get", "user", "b"}, ep...)...); got.stdout != want {
		t.Fatalf("get user b:\n%s\nwant:\n%s", got.stdout, want)
	}
	if code := w.stop(t); code != exitOK {
		t.Fatalf("watch exited %d", code)
	}

	// A new watch sees the drain as an override from the start.
	w = start(t, append([]string{"watch", "user"}, ep...)...)
	w.expectWatch(t, `# user: 2 instances at revision \d+; watching for changes`)
	w.expectWatch(t, `= 10\.0\.0\.1:9000 \(weight 0 \(draining, override\)\)`)
}
