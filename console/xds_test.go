package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// startXDS runs an xDS control plane publishing service from the registry
// in c, on a loopback port, until the test ends.
func startXDS(t *testing.T, c *etcdtest.Cluster, service string) (cp *xds.Server, addr string) {
	t.Helper()
	d, err := etcd.NewDiscovery(c.Client(t), etcd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("NewDiscovery: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	cp, err = xds.New(d, xds.WithServices(service), xds.WithSelfCheck())
	if err != nil {
		t.Fatalf("xds.New: %v", err)
	}
	t.Cleanup(func() {
		if n := cp.Stats().SelfCheckViolations; n > 0 {
			t.Errorf("the control plane published %d resources breaking an xDS client's precondition", n)
		}
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cp.Serve(context.Background(), lis) }()
	t.Cleanup(func() {
		_ = cp.Close()
		if err := <-done; err != nil && err != xds.ErrClosed {
			t.Errorf("xds Serve: %v", err)
		}
	})
	return cp, lis.Addr().String()
}

// dialXDS opens a grpc-go xDS channel to xds:///service as node nodeID in
// zone (of region eu-1), through the control plane at addr, and calls
// until backend answers.
func dialXDS(t *testing.T, addr, service, nodeID, zone, backend string) {
	t.Helper()
	b, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": %q, "locality": {"region": "eu-1", "zone": %q}}
}`, addr, nodeID, zone)))
	if err != nil {
		t.Fatalf("xDS resolver: %v", err)
	}
	conn, err := grpc.NewClient("xds:///"+service, grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	testbackend.CallUntil(t, conn, waitTimeout, "calling "+backend+" through xDS", testbackend.HasAll(backend))
}

func TestConsoleXDSClientsPage(t *testing.T) {
	c := etcdtest.Start(t)
	cp, addr := startXDS(t, c, "greeter")
	f := newFixtureOn(t, c, console.WithXDS(cp))
	be := testbackend.Start(t)
	f.register(registry.Instance{Name: "greeter", Addr: be.Addr, Zone: "eu-1a"})
	const node = `node-<b>1</b>`
	dialXDS(t, addr, "greeter", node, "eu-1a", be.Addr)
	var eds string
	deadline := time.Now().Add(waitTimeout)
	for eds == "" { // polling a snapshot: no event to wait on
		for _, cs := range cp.Clients() {
			for _, ts := range cs.Types {
				if ts.TypeURL == "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment" {
					eds = ts.Acked
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the control plane lists no acked endpoints: %+v", waitTimeout, cp.Clients())
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := browsertest.Start(t)
	nodeRow := fmt.Sprintf(`document.querySelector('#xds-clients tbody tr[data-node=%q]')`, node)
	b.Do(browsertest.Timeout, "the services page links to the xDS clients",
		chromedp.Navigate(f.url),
		browsertest.WaitJS(`!document.getElementById('xds-link').hidden`))
	// Navigate rather than click, so that no poll runs across the page
	// change.
	b.Do(browsertest.Timeout, "the xDS clients page lists the client with its acked versions",
		chromedp.Navigate(f.url+browsertest.Eval[string](b, `document.getElementById('xds-link').getAttribute('href')`)),
		browsertest.WaitJS(nodeRow+` !== null`),
		browsertest.WaitJS(nodeRow+`.querySelector('[data-type="ClusterLoadAssignment"] .acked').textContent === `+fmt.Sprintf("%q", eds)),
	)
	if got := b.Text(`#xds-clients tbody tr td.node`); got != node {
		t.Errorf("node cell = %q, want %q as text", got, node)
	}
	if n := browsertest.Eval[int](b, `document.querySelectorAll('#xds-clients b').length`); n != 0 {
		t.Errorf("the node ID made %d <b> elements: it must be text", n)
	}
	for _, typ := range []string{"Listener", "RouteConfiguration", "Cluster"} {
		if got := b.Text(fmt.Sprintf(`#xds-clients [data-type=%q] .acked`, typ)); got == "" || got == "—" {
			t.Errorf("%s: acked version %q, want one", typ, got)
		}
	}
	if z, r := b.Text(`#xds-clients tbody tr td.zone`), b.Text(`#xds-clients tbody tr td.region`); z != "eu-1a" || r != "eu-1" {
		t.Errorf("zone and region cells = %q, %q; want eu-1a, eu-1", z, r)
	}
	if got, want := b.Text(`#xds-clients tbody tr td.user-agent`), "gRPC Go "+grpc.Version; got != want {
		t.Errorf("client cell = %q, want %q", got, want)
	}
	if got := b.Text(`#xds-clients tbody tr td.services`); got != "greeter" {
		t.Errorf("services cell = %q, want greeter", got)
	}
	b.Screenshot("xds")
}

// Without WithXDS there is no xDS page: no link, and its stream is 404.
func TestConsoleNoXDS(t *testing.T) {
	f := newFixture(t)
	resp, err := (&http.Client{Timeout: waitTimeout}).Get(f.url + "api/xds/events")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET api/xds/events: %s, want 404", resp.Status)
	}
	if _, err := console.New(etcdStore(t, f.cli), console.WithXDS(nil)); err == nil {
		t.Error("WithXDS(nil): no error")
	}
}

// manyClients is a control plane's client table, counting how often it is
// read.
type manyClients struct {
	table []xds.ClientStatus
	reads atomic.Int64
}

// newManyClients is a table of n clients, each subscribed to services
// services of names of 1 KiB (the longest the table keeps).
func newManyClients(n, services int) *manyClients {
	svcs := make([]string, services)
	for j := range svcs {
		svcs[j] = fmt.Sprintf("service-%04d-%01012d", j, 0)
	}
	m := &manyClients{table: make([]xds.ClientStatus, n)}
	for i := range m.table {
		m.table[i] = xds.ClientStatus{Stream: int64(i), Node: fmt.Sprintf("node-%d", i), Services: svcs,
			Types: []xds.TypeStatus{{TypeURL: "type.googleapis.com/envoy.config.listener.v3.Listener", Resources: svcs}}}
	}
	return m
}

func (m *manyClients) Clients() []xds.ClientStatus {
	m.reads.Add(1)
	return m.table
}

// The xDS clients page's state is computed at most once a second for all
// its viewers, and is bounded whatever the clients subscribe to: 2,000 clients
// of 1,000 services with names of 1 KiB each (4 GB of JSON as the page
// used to send it) make an event of at most 1 MiB, listing fewer clients
// and services and saying how many more.
func TestConsoleXDSStateSharedAndBounded(t *testing.T) {
	cp := newManyClients(2000, 1000)
	f := newFixture(t, console.WithXDS(cp))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Five viewers at once.
	start := time.Now()
	sizes := make([]int, 5)
	var wg sync.WaitGroup
	for i := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := ssetest.First(ctx, t, f.url+"api/xds/events", nil, "state")
			sizes[i] = len(ev.Data)
			var st struct {
				Clients []struct {
					MoreServices int `json:"moreServices"`
				} `json:"clients"`
				More int `json:"more"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &st); err != nil {
				t.Error(err)
				return
			}
			if len(st.Clients) == 0 || len(st.Clients)+st.More != 2000 || st.Clients[0].MoreServices != 980 {
				t.Errorf("state: %d clients listed, %d more, %d more services; want some listed and the rest counted, 980 more services",
					len(st.Clients), st.More, st.Clients[0].MoreServices)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("5 viewers at once: events of %v bytes in %v, the table read %d times", sizes, took, cp.reads.Load())
	if sizes[0] > 1<<20 {
		t.Errorf("an event of %d bytes, want at most 1 MiB", sizes[0])
	}
	// Once per refresh (a second) at most, whatever the number of
	// viewers; one more across a second's edge.
	if n, most := cp.reads.Load(), int64(took/time.Second)+2; n > most {
		t.Errorf("5 viewers in %v read the client table %d times, want at most %d (once a second)", took, n, most)
	}
}
