// Package promtest runs a real Prometheus server (Debian's prometheus
// package) as a child process on a loopback port, with a configuration of
// the test's scrape jobs, a scrape interval of 1 s and a data directory of
// its own, and reads its targets (/api/v1/targets).
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/proctest"
)

// Binary is the Prometheus server command, looked up in PATH.
const Binary = "prometheus"

// StartTimeout bounds how long Start waits for the server to be ready.
const StartTimeout = 60 * time.Second

// UpdatePeriod is how often Prometheus's discovery manager hands
// discovered targets to its scrape manager (its updatert, fixed at 5 s in
// 2.42): a discovered change reaches scraping within a refresh interval
// plus this period.
const UpdatePeriod = 5 * time.Second

// Interval is the scrape interval of every job and the refresh interval of
// HTTPSDJob's service discovery.
const Interval = time.Second

// Available reports why a Prometheus server cannot be started here, or nil.
func Available() error {
	if _, err := exec.LookPath(Binary); err != nil {
		return fmt.Errorf("promtest: %w (install Debian's prometheus package)", err)
	}
	return nil
}

// Require skips t when Prometheus is not available, or fails it when the
// environment variable CI is "true".
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI must run the Prometheus tests", err)
		}
		t.Skipf("%v; skipping the Prometheus test", err)
	}
}

// HTTPSDJob returns a scrape job named name whose targets come from the
// HTTP service discovery at url, refreshed every Interval; extra is YAML
// added to the job, indented by four spaces (relabel_configs, ...).
func HTTPSDJob(name, url, extra string) string {
	return fmt.Sprintf("  - job_name: %q\n    http_sd_configs:\n      - url: %q\n        refresh_interval: 1s\n%s",
		name, url, extra)
}

// Server is a running Prometheus.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:port.
	URL string

	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// Start starts Prometheus with the given scrape jobs (HTTPSDJob) and stops
// it at t.Cleanup. It returns once the server is ready.
func Start(t testing.TB, jobs ...string) *Server {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	cfg := "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1m\nscrape_configs:\n" + strings.Join(jobs, "")
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var ports proctest.Ports
	port, err := ports.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &Server{URL: "http://" + addr, done: make(chan struct{}), log: filepath.Join(dir, "prometheus.log")}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(Binary, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = proctest.SysProcAttr()
	ports.Release()
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("promtest: start %s: %v", Binary, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(s.stop)
	if err := s.waitReady(); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitReady polls /-/ready (no event announces readiness), failing as soon
// as the process has exited.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(StartTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("promtest: prometheus exited before being ready; log:\n%s", s.logTail())
		default:
		}
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("promtest: prometheus not ready after %v (last: %v); log:\n%s", StartTimeout, last, s.logTail())
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop ends the server: SIGTERM, then SIGKILL after 10 s.
func (s *Server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Target is one target of /api/v1/targets.
type Target struct {
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	Labels           map[string]string `json:"labels"`
	ScrapePool       string            `json:"scrapePool"`
	ScrapeURL        string            `json:"scrapeUrl"`
	Health           string            `json:"health"` // "up", "down" or "unknown"
	LastError        string            `json:"lastError"`
}

// Targets is the answer of /api/v1/targets.
type Targets struct {
	Active  []Target `json:"activeTargets"`
	Dropped []Target `json:"droppedTargets"`
}

// Targets returns the server's active and dropped targets.
func (s *Server) Targets(ctx context.Context) (Targets, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/targets", nil)
	if err != nil {
		return Targets{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Targets{}, fmt.Errorf("promtest: targets: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string  `json:"status"`
		Data   Targets `json:"data"`
		Error  string  `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return Targets{}, fmt.Errorf("promtest: targets: %w", err)
	}
	if body.Status != "success" {
		return Targets{}, fmt.Errorf("promtest: targets: %s %s", body.Status, body.Error)
	}
	return body.Data, nil
}

// WaitTargets polls the targets (Prometheus announces no change) until ok
// accepts them, and returns them; it fails t after timeout, showing the
// last targets and describe's account of what was awaited.
func (s *Server) WaitTargets(t testing.TB, timeout time.Duration, describe string, ok func(Targets) bool) Targets {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last Targets
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last, lastErr = s.Targets(ctx)
		cancel()
		if lastErr == nil && ok(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("promtest: not %s within %v; last targets %+v (error %v); log:\n%s",
				describe, timeout, last, lastErr, s.logTail())
		}
		time.Sleep(250 * time.Millisecond) // the answer may list thousands of targets: not too often
	}
}
