package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// probe is one process's health listener in these tests.
type probe struct {
	name, addr string
}

// get returns the status and body of GET path on p.
func (p probe) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := (&http.Client{Timeout: waitTimeout}).Get("http://" + p.addr + path)
	if err != nil {
		t.Fatalf("%s: GET %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: GET %s: %v", p.name, path, err)
	}
	return resp.StatusCode, body
}

// readyz returns /readyz's status and body, failing t unless the body is
// a health.Report whose ready agrees with the status.
func (p probe) readyz(t *testing.T) (int, health.Report) {
	t.Helper()
	code, body := p.get(t, "/readyz")
	var r health.Report
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s: /readyz %d %q does not parse: %v", p.name, code, body, err)
	}
	if r.Ready != (code == http.StatusOK) || code != http.StatusOK && code != http.StatusServiceUnavailable {
		t.Fatalf("%s: /readyz %d with ready %v: %s", p.name, code, r.Ready, body)
	}
	return code, r
}

// live fails t unless /livez answers 200.
func (p probe) live(t *testing.T) {
	t.Helper()
	if code, body := p.get(t, "/livez"); code != http.StatusOK {
		t.Errorf("%s: /livez = %d %s, want 200", p.name, code, body)
	}
}

// await polls /readyz until done holds of its report, failing t after
// waitTimeout, or at once when an answer is not ready while mustBeReady.
// It returns the report that satisfied done.
func (p probe) await(t *testing.T, what string, mustBeReady bool, done func(health.Report) bool) health.Report {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		code, r := p.readyz(t)
		if mustBeReady && code != http.StatusOK {
			t.Fatalf("%s: /readyz = %d while waiting for %s, want 200 throughout: %+v", p.name, code, what, r)
		}
		if done(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no /readyz with %s within %v; last: %+v", p.name, what, waitTimeout, r)
		}
		time.Sleep(50 * time.Millisecond) // polling an HTTP endpoint
	}
}

// service returns the report's entry of name.
func service(r health.Report, name string) (health.Service, bool) {
	i := slices.IndexFunc(r.Services, func(s health.Service) bool { return s.Name == name })
	if i < 0 {
		return health.Service{}, false
	}
	return r.Services[i], true
}

// Each long-running process that reads an etcd cluster (muster xds,
// muster console, muster register) answers /readyz 503 until it has
// loaded what it serves, 200 once it has, and still 200 while its etcd
// does not answer, with the service marked stale since then and why;
// /livez is 200 throughout. After the outage the marks go.
func TestHealthDuringEtcdOutage(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	ep := c.Endpoints()[0]
	// A lease of a minute outlives the outage.
	greeter, err := etcd.NewRegistrar(newClient(t, ep), etcd.WithTTL(time.Minute), etcd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = greeter.Close() })
	register(t, greeter, registry.Instance{Name: "greeter", ID: "g1", Addr: "127.0.0.1:9"})
	be := testbackend.Start(t)

	m.Reset() // the processes start while etcd refuses every connection
	xds := start(t, "xds", "--endpoints", ep, "--timeout", "1s", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	console := start(t, "console", "--endpoints", ep, "--timeout", "1s", "--listen", "127.0.0.1:0")
	side := startReading(t, true, "register", "--endpoints", ep, "--timeout", "1s", "--name", "sidecar", "--addr", be.Addr,
		"--check", "grpc://"+be.Addr, "--interval", "100ms", "--ttl", "3s", "--metrics-listen", "127.0.0.1:0")
	probes := []probe{
		{"muster xds", waitLogged(t, xds.stderr, `health on http://(\S+)/livez`)},
		{"muster console", waitLogged(t, console.stderr, `console on http://(\S+)/ui/`)},
		{"muster register", waitLogged(t, side.stderr, `health on http://(\S+)/livez`)},
	}
	// phase runs f for each probe at once, so that a phase takes as long
	// as the slowest process, not their sum, and stops the test if one
	// failed.
	phase := func(name string, f func(t *testing.T, p probe, service string)) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			for _, p := range probes {
				t.Run(p.name, func(t *testing.T) {
					t.Parallel()
					svc := "greeter" // what xds and console serve
					if p.name == "muster register" {
						svc = "sidecar"
					}
					f(t, p, svc)
				})
			}
		})
		if t.Failed() {
			t.FailNow()
		}
	}
	loaded := func(name string) func(health.Report) bool {
		return func(r health.Report) bool {
			s, ok := service(r, name)
			return r.Ready && ok && s.Loaded && s.Instances == 1 && s.StaleSince.IsZero() && s.Error == ""
		}
	}

	phase("before", func(t *testing.T, p probe, svc string) {
		p.live(t)
		if code, r := p.readyz(t); code != http.StatusServiceUnavailable || r.Waiting == "" {
			t.Errorf("%s: /readyz before etcd answered once = %d %+v, want 503 saying what it waits for", p.name, code, r)
		}
		if svc == "greeter" { // xds and console list the registry's services: the listing fails, and says why
			r := p.await(t, "the listing's failure", false, func(r health.Report) bool { return r.Error != "" })
			if r.Ready || r.StaleSince.IsZero() || r.Cause != health.CauseUnavailable {
				t.Errorf("%s: /readyz while the listing fails = %+v, want not ready, stale, cause unavailable", p.name, r)
			}
		}
	})

	m.Heal()
	phase("loaded", func(t *testing.T, p probe, svc string) {
		p.await(t, svc+" loaded", false, loaded(svc))
		p.live(t)
	})

	m.Reset() // the outage: every connection, open or new, is reset
	outage := time.Now()
	phase("outage", func(t *testing.T, p probe, svc string) {
		r := p.await(t, svc+" stale", true, func(r health.Report) bool {
			s, _ := service(r, svc)
			return !s.StaleSince.IsZero()
		})
		s, _ := service(r, svc)
		if !s.Loaded || s.Instances != 1 || s.Error == "" || !slices.Contains(health.Causes(), s.Cause) {
			t.Errorf("%s: %s stale as %+v, want its instance, an error and a cause", p.name, svc, s)
		}
		t.Logf("%s: %s stale %v after the outage began: %s (%s)", p.name, svc, time.Since(outage).Round(time.Millisecond), s.Cause, s.Error)
		p.live(t)
	})

	m.Heal()
	phase("recovered", func(t *testing.T, p probe, svc string) {
		p.await(t, svc+" fresh again", true, loaded(svc))
		p.live(t)
	})
	failures, byCause := 0.0, map[string]float64{}
	for _, m := range scrape(t, probes[2].addr)["muster_register_etcd_failures_total"].GetMetric() {
		failures += m.GetCounter().GetValue()
		byCause[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if failures == 0 {
		t.Errorf("register's muster_register_etcd_failures_total after the outage: %v, want failures counted", byCause)
	}
	t.Logf("register's etcd failures by cause after the outage: %v", byCause)
}

// counterOf returns the value of the counter (or gauge) family name at
// addr's /metrics whose one label has value ("" for a family without
// labels).
func counterOf(t *testing.T, addr, name, value string) float64 {
	t.Helper()
	for _, m := range scrape(t, addr)[name].GetMetric() {
		if len(m.GetLabel()) == 0 && value == "" || len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == value {
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("/metrics at %s has no %s{%q}", addr, name, value)
	return 0
}

// muster register --metrics-listen counts its checks by result and shows
// the state it keeps its instance in, which follows the checks: drained
// after --failures failed checks, registered again when they pass.
func TestRegisterMetricsFollowChecks(t *testing.T) {
	ep := etcdtest.Start(t).Endpoints()[0]
	be := testbackend.Start(t)
	side := startReading(t, true, "register", "--endpoints", ep, "--name", "sidecar", "--addr", be.Addr,
		"--check", "grpc://"+be.Addr, "--interval", "100ms", "--failures", "2", "--metrics-listen", "127.0.0.1:0")
	addr := waitLogged(t, side.stderr, `metrics on http://(\S+)/metrics`)
	await := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within %v; muster_register_state: %v", what, waitTimeout, scrape(t, addr)["muster_register_state"].GetMetric())
			}
			time.Sleep(50 * time.Millisecond) // polling /metrics
		}
	}
	state := func(want string) func() bool {
		return func() bool { return counterOf(t, addr, "muster_register_state", want) == 1 }
	}
	await("state registered", state("registered"))
	if v := counterOf(t, addr, "muster_registrar_registered", ""); v != 1 {
		t.Errorf("muster_registrar_registered = %v once registered, want 1", v)
	}
	// A check may fail on a loaded machine (its timeout is --interval),
	// so failures are counted from here.
	passed, failed := counterOf(t, addr, "muster_register_checks_total", "pass"), counterOf(t, addr, "muster_register_checks_total", "fail")
	if passed == 0 {
		t.Errorf("checks once registered: %v passed, want some", passed)
	}

	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	await("state drained", state("drained"))
	if now := counterOf(t, addr, "muster_register_checks_total", "fail"); now < failed+2 {
		t.Errorf("checks failed: %v before NOT_SERVING, %v once drained; want at least --failures 2 more", failed, now)
	}
	if v := counterOf(t, addr, "muster_register_state", "registered"); v != 0 {
		t.Errorf("muster_register_state{state=registered} = %v while drained, want 0", v)
	}
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	await("state registered again", state("registered"))
}
