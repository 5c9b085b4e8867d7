package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// xdsBootstrap is a bootstrap as the tests read muster xds-bootstrap's
// output.
type xdsBootstrap struct {
	XDSServers []struct {
		ServerURI      string        `json:"server_uri"`
		ChannelCreds   []channelCred `json:"channel_creds"`
		ServerFeatures []string      `json:"server_features"`
	} `json:"xds_servers"`
	Node struct {
		ID       string             `json:"id"`
		Locality *bootstrapLocality `json:"locality"`
	} `json:"node"`
}

type bootstrapLocality struct {
	Region string `json:"region"`
	Zone   string `json:"zone"`
}

type channelCred struct {
	Type   string          `json:"type"`
	Config *tlsCredsConfig `json:"config"`
}

type tlsCredsConfig struct {
	CACertificateFile string `json:"ca_certificate_file"`
	CertificateFile   string `json:"certificate_file"`
	PrivateKeyFile    string `json:"private_key_file"`
}

func TestXDSBootstrap(t *testing.T) {
	r := runOK(t, "xds-bootstrap", "--server", "127.0.0.1:18000", "--node-id", "web-1", "--zone", "z1", "--region", "r1")
	var b xdsBootstrap
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
	}
	if len(b.XDSServers) != 1 || b.XDSServers[0].ServerURI != "127.0.0.1:18000" ||
		b.Node.ID != "web-1" || b.Node.Locality == nil || b.Node.Locality.Zone != "z1" || b.Node.Locality.Region != "r1" {
		t.Fatalf("bootstrap %s", r.stdout)
	}
	features := b.XDSServers[0].ServerFeatures
	if len(features) != 2 || features[0] != "xds_v3" || features[1] != "ignore_resource_deletion" {
		t.Errorf("server features %v, want xds_v3 and ignore_resource_deletion", features)
	}
	// gRPC itself accepts it.
	if _, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(r.stdout)); err != nil {
		t.Fatalf("grpc-go rejects the bootstrap: %v\n%s", err, r.stdout)
	}

	// Without --zone or --region the node's locality is empty, not
	// absent: grpc-js-xds refuses a node without one (the client matrix
	// runs these bootstraps in every client).
	r = runOK(t, "xds-bootstrap", "--server", "cp.example:18000", "--node-id", "web-2")
	var plain xdsBootstrap
	if err := json.Unmarshal([]byte(r.stdout), &plain); err != nil || plain.Node.Locality == nil ||
		*plain.Node.Locality != (bootstrapLocality{}) || strings.Contains(r.stdout, `"zone"`) {
		t.Errorf("a bootstrap without --zone: %s (error %v), want an empty locality", r.stdout, err)
	}
	r = runOK(t, "xds-bootstrap", "--server", "cp.example:18000", "--node-id", "web-3", "--region", "r1")
	var regional xdsBootstrap
	if err := json.Unmarshal([]byte(r.stdout), &regional); err != nil || regional.Node.Locality == nil ||
		regional.Node.Locality.Region != "r1" || strings.Contains(r.stdout, `"zone"`) {
		t.Errorf("a bootstrap with --region only: %s (error %v), want a locality with the region alone", r.stdout, err)
	}
	for _, args := range [][]string{
		{"xds-bootstrap", "--node-id", "web-1"},
		{"xds-bootstrap", "--server", "127.0.0.1:18000"},
		{"xds-bootstrap", "--server", "no-port", "--node-id", "web-1"},
		{"xds-bootstrap", "--server", "127.0.0.1:18000", "--node-id", "web-1", "--xds-cert", "c.pem"},
	} {
		if r := run(args...); r.code != exitUsage {
			t.Errorf("muster %v: exit code %d, want %d (usage); stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// Several control planes: one server URI naming all (--form list), or one
// xds_servers entry each (--form fallback, in order); grpc-go accepts both
// bootstraps, and bad combinations are usage errors naming the flag.
func TestXDSBootstrapSeveral(t *testing.T) {
	uris := func(args ...string) []string {
		t.Helper()
		r := runOK(t, append([]string{"xds-bootstrap", "--node-id", "web-1"}, args...)...)
		var b xdsBootstrap
		if err := json.Unmarshal([]byte(r.stdout), &b); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
		}
		if _, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(r.stdout)); err != nil {
			t.Fatalf("grpc-go rejects the bootstrap: %v\n%s", err, r.stdout)
		}
		var out []string
		for _, s := range b.XDSServers {
			if len(s.ChannelCreds) != 1 || len(s.ServerFeatures) != 2 {
				t.Errorf("server %+v: want the creds and features of a single server", s)
			}
			out = append(out, s.ServerURI)
		}
		return out
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--server", "10.0.0.5:18000,10.0.0.6:18001", "--form", "list"}, []string{"ipv4:10.0.0.5:18000,10.0.0.6:18001"}},
		{[]string{"--server", "10.0.0.5:18000", "--server", "10.0.0.6:18001", "--form", "list"}, []string{"ipv4:10.0.0.5:18000,10.0.0.6:18001"}},
		{[]string{"--server", "[fd00::5]:18000,[fd00::6]:18000", "--form", "list"}, []string{"ipv6:[fd00::5]:18000,[fd00::6]:18000"}},
		{[]string{"--server", "cp-a.example:18000,cp-b.example:18000", "--form", "fallback"}, []string{"cp-a.example:18000", "cp-b.example:18000"}},
		{[]string{"--server", "cp.example:18000", "--form", "list"}, []string{"cp.example:18000"}}, // one name: as given
	} {
		if got := uris(c.args...); !slices.Equal(got, c.want) {
			t.Errorf("%v: server URIs %q, want %q", c.args, got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--server", "10.0.0.5:18000,10.0.0.6:18000"}, "--form"},
		{[]string{"--server", "10.0.0.5:18000,10.0.0.6:18000", "--form", "ring"}, `--form "ring"`},
		{[]string{"--server", "cp-a.example:18000,10.0.0.6:18000", "--form", "list"}, `--server "cp-a.example:18000"`},
		{[]string{"--server", "10.0.0.5:18000,[fd00::6]:18000", "--form", "list"}, `--server "[fd00::6]:18000"`},
		{[]string{"--server", "10.0.0.5:18000,no-port", "--form", "fallback"}, `--server "no-port"`},
	} {
		args := append([]string{"xds-bootstrap", "--node-id", "web-1"}, c.args...)
		r := run(args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("muster %v: exit code %d, stderr %q; want %d (usage) naming %s", args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

// xdsAddr waits until the log in stderr says where ADS is served.
func xdsAddr(t *testing.T, stderr interface{ String() string }) string {
	t.Helper()
	return waitLogged(t, stderr, `xds control plane serving ADS on ([^\s"]+)`)
}

// waitLogged waits until the log in stderr has a line matching pattern and
// returns the pattern's first group in it, failing t after waitTimeout.
func waitLogged(t *testing.T, stderr interface{ String() string }, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(waitTimeout)
	for {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line matching %q within %v; stderr:\n%s", pattern, waitTimeout, stderr)
		}
		time.Sleep(10 * time.Millisecond) // polling a log
	}
}

// xdsCallThen calls service through the xDS control plane at addr, as a
// grpc-go client with the plaintext bootstrap muster xds-bootstrap writes, and returns the address that
// served the call; then it runs then (if not nil) while the client is
// still connected: its ACK of the last resource may reach the control
// plane after the call, and closing the client first could lose it.
func xdsCallThen(t *testing.T, addr, service string, then func()) string {
	t.Helper()
	bootstrap := runOK(t, "xds-bootstrap", "--server", addr, "--node-id", "test").stdout
	got, err := xdsCallWith(bootstrap, service, waitTimeout, then)
	if err != nil {
		t.Fatalf("call through xds:///%s: %v", service, err)
	}
	return got
}

// xdsCallWith calls xds:///service as a client with this bootstrap,
// waiting for the channel to be ready until timeout, and returns the
// address that served the call.
func xdsCallWith(bootstrap, service string, timeout time.Duration, then func()) (string, error) {
	b, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	conn, err := grpc.NewClient("xds:///"+service, grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true))
	if err == nil && then != nil {
		then()
	}
	return got, err
}

func TestXDSCommand(t *testing.T) {
	s := startServe(t, t.TempDir())
	be := testbackend.Start(t)
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "greeter", Addr: be.Addr})

	cp := start(t, "xds", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0", "--services", "greeter",
		"--metrics-listen", "127.0.0.1:0")
	if got := xdsCallThen(t, xdsAddr(t, cp.stderr), "greeter", func() { checkXDSMetrics(t, cp.stderr) }); got != be.Addr {
		t.Fatalf("call served by %s, want %s", got, be.Addr)
	}
	if code := cp.stop(t); code != 0 {
		t.Fatalf("muster xds exit code %d after its context ended; stderr:\n%s", code, cp.stderr)
	}

	for _, args := range [][]string{
		{"xds", "--listen", "no-port"},
		{"xds", "--services", "Bad_Name"},
		{"xds", "--policy", "random"},
		{"xds", "--forget-after", "0s"},
		{"xds", "--metrics-listen", "no-port"},
		{"xds", "--max-connections", "0"},
		{"xds", "--client-connections", "0"},
		{"xds", "--client-streams", "-1"},
		{"xds", "--xds-cert", "c.pem"},
		{"xds", "--xds-cacert", "ca.pem"},
		{"xds", "--slow-start", "30s"}, // round_robin has none
		{"xds", "--policy", "muster_wrr", "--slow-start", "2h"},
		{"xds", "--policy", "muster_wrr", "--slow-start", "30s", "--slow-start-aggression", "0"},
		{"xds", "--policy", "muster_p2c", "--slow-start", "30s", "--slow-start-min-weight-percent", "101"},
	} {
		if r := run(args...); r.code != exitUsage {
			t.Errorf("muster %v: exit code %d, want %d (usage); stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// serve --xds-listen publishes every registered service; one registered
// after the start is listed as soon as a client asks for it (within a
// second of the start's listing), not at the next periodic listing (10 s).
func TestServeXDSListen(t *testing.T) {
	urls := freeLoopbackURLs(t, 2)
	s, err := tryServe(t, serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "test",
		xdsAddr: "127.0.0.1:0", metricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("serve did not start: %v", err)
	}
	addr := xdsAddr(t, s.stderr)
	be := testbackend.Start(t)
	t0 := time.Now()
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "greeter", Addr: be.Addr})
	t1 := time.Now()
	var first time.Duration
	if got := xdsCallThen(t, addr, "greeter", func() { first = time.Since(t1); checkXDSMetrics(t, s.stderr) }); got != be.Addr {
		t.Fatalf("call served by %s, want %s", got, be.Addr)
	}
	t.Logf("register %v, first call %v", t1.Sub(t0), first)
	checkConsoleHasXDS(t, s.stderr)
	s.stop(t)
}

// checkConsoleHasXDS checks that the console on the metrics address the
// log in stderr gives has the xDS clients page.
func checkConsoleHasXDS(t *testing.T, stderr interface{ String() string }) {
	t.Helper()
	m := regexp.MustCompile(`console on (http://[0-9.:]+/ui/)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no console address logged:\n%s", stderr)
	}
	resp, err := (&http.Client{Timeout: waitTimeout}).Get(m[1] + "api/session")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		XDS bool `json:"xds"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || !info.XDS {
		t.Errorf("console session %+v (error %v): want the xDS clients page", info, err)
	}
}

// checkXDSMetrics scrapes the /metrics whose address the log in stderr
// gives until the control plane's counters show that a client received and
// acknowledged greeter's four resources, without NACK.
func checkXDSMetrics(t *testing.T, stderr interface{ String() string }) {
	t.Helper()
	m := regexp.MustCompile(`metrics on http://([0-9.:]+)/metrics`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no metrics address logged:\n%s", stderr)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(waitTimeout)
	for {
		resp, err := client.Get("http://" + m[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		if metricValue(fams, "muster_xds_acks_total", "") >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, muster_xds_acks_total = %v, want >= 4", waitTimeout, metricValue(fams, "muster_xds_acks_total", ""))
		}
		time.Sleep(10 * time.Millisecond) // polling counters: no event to wait on
	}
	for _, w := range []struct {
		name, service string
		min, max      float64
	}{
		{"muster_xds_services", "", 1, 1},
		{"muster_xds_nacks_total", "", 0, 0},
		{"muster_xds_pushes_total", "greeter", 4, 4}, // one of each type
		{"muster_discovery_instances", "greeter", 1, 1},
	} {
		if got := metricValue(fams, w.name, w.service); got < w.min || got > w.max {
			t.Errorf("%s{service=%q} = %v, want %v..%v", w.name, w.service, got, w.min, w.max)
		}
	}
	if fams["go_goroutines"] == nil {
		t.Error("/metrics lacks the process's own metrics (go_goroutines)")
	}
}

// metricValue sums the series of name (those of service, if not empty);
// -1 if there is none.
func metricValue(fams map[string]*dto.MetricFamily, name, service string) float64 {
	sum, found := 0.0, false
	for _, m := range fams[name].GetMetric() {
		if service != "" {
			ok := false
			for _, l := range m.GetLabel() {
				ok = ok || (l.GetName() == "service" && l.GetValue() == service)
			}
			if !ok {
				continue
			}
		}
		found = true
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	if !found {
		return -1
	}
	return sum
}

// muster xds --xds-cert --xds-key serves ADS over TLS, and with
// --xds-cacert requires a client certificate signed by that CA: an ADS
// client with the CA and its certificate gets greeter's Listener; one
// without a certificate, one with a certificate of another CA, and a
// plaintext one are refused. (The xds package's TestTLS does the same with
// grpc-go's xDS client and a bootstrap's tls channel credentials.)
func TestXDSTLS(t *testing.T) {
	s := startServe(t, t.TempDir())
	be := testbackend.Start(t)
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "greeter", Addr: be.Addr})
	f, other := etcdtest.GenerateTLS(t), etcdtest.GenerateTLS(t)
	withoutCert := f.ClientTLS()
	withoutCert.Certificates = nil
	wrongCA := other.ClientTLS()
	wrongCA.RootCAs = f.ClientTLS().RootCAs

	t.Run("client certificates required", func(t *testing.T) {
		cp := start(t, "xds", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0", "--services", "greeter",
			"--xds-cert", f.ServerCertFile, "--xds-key", f.ServerKeyFile, "--xds-cacert", f.CAFile)
		addr := xdsAddr(t, cp.stderr)
		if !strings.Contains(cp.stderr.String(), `security="TLS, client certificates required"`) {
			t.Errorf("the log does not say TLS with client certificates:\n%s", cp.stderr)
		}
		for name, creds := range map[string]credentials.TransportCredentials{
			"no client certificate":       credentials.NewTLS(withoutCert),
			"a certificate of another CA": credentials.NewTLS(wrongCA),
			"plaintext":                   insecure.NewCredentials(),
		} {
			if err := adsListener(addr, creds, "greeter"); err == nil {
				t.Errorf("a client with %s was served", name)
			}
		}
		if err := adsListener(addr, credentials.NewTLS(f.ClientTLS()), "greeter"); err != nil {
			t.Fatalf("a client with a certificate of the CA: %v", err)
		}
	})

	t.Run("server certificate only", func(t *testing.T) {
		cp := start(t, "xds", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0", "--services", "greeter",
			"--xds-cert", f.ServerCertFile, "--xds-key", f.ServerKeyFile)
		addr := xdsAddr(t, cp.stderr)
		if err := adsListener(addr, credentials.NewTLS(other.ClientTLS()), "greeter"); err == nil {
			t.Error("a client trusting another CA was served")
		}
		if err := adsListener(addr, credentials.NewTLS(withoutCert), "greeter"); err != nil {
			t.Fatalf("a TLS client without a certificate: %v", err)
		}
	})

	t.Run("rotation", func(t *testing.T) {
		dir := t.TempDir()
		cert, key, ca := filepath.Join(dir, "cp.pem"), filepath.Join(dir, "cp-key.pem"), filepath.Join(dir, "ca.pem")
		install := func(from *etcdtest.TLSFiles) {
			for src, dst := range map[string]string{from.ServerCertFile: cert, from.ServerKeyFile: key, from.CAFile: ca} {
				b, err := os.ReadFile(src)
				if err == nil {
					err = os.WriteFile(dst+".new", b, 0o600)
				}
				if err == nil {
					err = os.Rename(dst+".new", dst)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		install(f)
		cp := start(t, "xds", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0", "--services", "greeter",
			"--xds-cert", cert, "--xds-key", key, "--xds-cacert", ca)
		addr := xdsAddr(t, cp.stderr)
		if err := adsListener(addr, credentials.NewTLS(f.ClientTLS()), "greeter"); err != nil {
			t.Fatalf("a client of the first CA: %v", err)
		}
		install(other)
		if err := adsListener(addr, credentials.NewTLS(other.ClientTLS()), "greeter"); err != nil {
			t.Fatalf("a client of the next CA, after the files were replaced: %v", err)
		}
		if err := adsListener(addr, credentials.NewTLS(f.ClientTLS()), "greeter"); err == nil {
			t.Error("a client of the first CA was served after the files were replaced")
		}
		if !strings.Contains(cp.stderr.String(), "TLS files reloaded") {
			t.Errorf("the log does not say the files were reloaded:\n%s", cp.stderr)
		}
	})

	t.Run("serve", func(t *testing.T) {
		urls := freeLoopbackURLs(t, 2)
		s, err := tryServe(t, serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "tls",
			xdsAddr: "127.0.0.1:0", xdsTLS: xdsTLS{cert: f.ServerCertFile, key: f.ServerKeyFile, cacert: f.CAFile}})
		if err != nil {
			t.Fatalf("serve did not start: %v", err)
		}
		register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "greeter", Addr: be.Addr})
		addr := xdsAddr(t, s.stderr)
		if err := adsListener(addr, credentials.NewTLS(withoutCert), "greeter"); err == nil {
			t.Error("serve --xds-cacert: a client without a certificate was served")
		}
		if err := adsListener(addr, credentials.NewTLS(f.ClientTLS()), "greeter"); err != nil {
			t.Fatalf("serve --xds-cacert: a client with a certificate of the CA: %v", err)
		}
		s.stop(t)
	})

	t.Run("bootstrap", func(t *testing.T) {
		r := runOK(t, "xds-bootstrap", "--server", "127.0.0.1:18000", "--node-id", "web-1",
			"--xds-cacert", f.CAFile, "--xds-cert", f.CertFile, "--xds-key", f.KeyFile)
		var b xdsBootstrap
		if err := json.Unmarshal([]byte(r.stdout), &b); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
		}
		want := channelCred{Type: "tls", Config: &tlsCredsConfig{CACertificateFile: f.CAFile, CertificateFile: f.CertFile, PrivateKeyFile: f.KeyFile}}
		if got := b.XDSServers[0].ChannelCreds; len(got) != 1 || got[0].Type != want.Type || got[0].Config == nil || *got[0].Config != *want.Config {
			t.Errorf("channel_creds %s, want one of type tls with the three files", r.stdout)
		}
		r = runOK(t, "xds-bootstrap", "--server", "cp.example:18000", "--node-id", "web-1", "--tls")
		if !strings.Contains(r.stdout, `"type": "tls"`) || strings.Contains(r.stdout, "config") {
			t.Errorf("--tls alone: want tls channel credentials without config (the system's CAs):\n%s", r.stdout)
		}
	})
}

// adsListener asks the control plane at addr for the Listener named
// service over an ADS stream with creds, and returns an error unless it
// gets it within 10 s.
func adsListener(addr string, creds credentials.TransportCredentials, service string) error {
	return adsListenerWithin(addr, creds, service, 10*time.Second)
}

// adsListenerWithin is adsListener, failing unless it is done within
// timeout, its connection made with opts too.
func adsListenerWithin(addr string, creds credentials.TransportCredentials, service string, timeout time.Duration, opts ...grpc.DialOption) error {
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		Node: &corev3.Node{Id: "tls-test"}, TypeUrl: resourcev3.ListenerType, ResourceNames: []string{service},
	}); err != nil {
		return err
	}
	// A control plane that lists services finds one a client asks for
	// within about a second: the first answers may come without it.
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if len(resp.GetResources()) == 1 {
			return nil
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{ // the ACK
			TypeUrl: resourcev3.ListenerType, ResourceNames: []string{service},
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
		}); err != nil {
			return err
		}
	}
}

// muster xds follows each service's canary setting: at 100 % every
// uncolored call through xDS goes to the canary's color.
func TestXDSCommandFollowsTheCanary(t *testing.T) {
	s := startServe(t, t.TempDir())
	base, blue := testbackend.Start(t), testbackend.Start(t)
	reg := newRegistrar(t, s.endpoint)
	register(t, reg, registry.Instance{Name: "greeter", Addr: base.Addr})
	register(t, reg, registry.Instance{Name: "greeter", Addr: blue.Addr, Metadata: map[string]string{"color": "blue"}})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := etcd.SetCanary(ctx, newClient(t, s.endpoint), "greeter", registry.Canary{Color: "blue", Percent: 100}); err != nil {
		t.Fatal(err)
	}
	cp := start(t, "xds", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0", "--services", "greeter")
	if got := xdsCallThen(t, xdsAddr(t, cp.stderr), "greeter", nil); got != blue.Addr {
		t.Fatalf("an uncolored call with a 100%% canary to blue was served by %s, want the blue instance %s", got, blue.Addr)
	}
	if code := cp.stop(t); code != 0 {
		t.Fatalf("muster xds exit code %d; stderr:\n%s", code, cp.stderr)
	}
}

// muster xds publishes the service's call policy (muster policy): with a
// timeout of 200 ms, a call to a backend that answers after 3 s ends with
// DEADLINE_EXCEEDED.
func TestXDSCommandFollowsThePolicy(t *testing.T) {
	s := startServe(t, t.TempDir())
	slow := testbackend.Start(t)
	slow.SetDelay(3 * time.Second)
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "greeter", Addr: slow.Addr})
	runOK(t, "policy", "greeter", "set", "timeout=200ms", "--endpoints", s.endpoint)
	cp := start(t, "xds", "--endpoints", s.endpoint, "--listen", "127.0.0.1:0", "--services", "greeter")
	bootstrap := runOK(t, "xds-bootstrap", "--server", xdsAddr(t, cp.stderr), "--node-id", "test").stdout
	start := time.Now()
	_, err := xdsCallWith(bootstrap, "greeter", waitTimeout, nil)
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 2*time.Second {
		t.Fatalf("a call under a 200 ms policy timeout to a 3 s backend: %v after %v; want DEADLINE_EXCEEDED well before 3s", err, time.Since(start))
	}
	if code := cp.stop(t); code != 0 {
		t.Fatalf("muster xds exit code %d; stderr:\n%s", code, cp.stderr)
	}
}
