package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// twoClusters is a console over two real etcd clusters, eu (region eu-1)
// and us, each with a registrar.
type twoClusters struct {
	t      *testing.T
	eu, us *etcdtest.Cluster
	euCli  *clientv3.Client
	usCli  *clientv3.Client
	euReg  *etcd.Registrar
	usReg  *etcd.Registrar
	url    string // the console's base URL, ending in /ui/
	log    *logBuffer
}

func newTwoClusters(t *testing.T, opts ...console.Option) *twoClusters {
	t.Helper()
	f := &twoClusters{t: t, eu: etcdtest.Start(t), us: etcdtest.Start(t), log: &logBuffer{}}
	f.euCli, f.usCli = f.eu.Client(t), f.us.Client(t)
	f.euReg, f.usReg = clusterRegistrar(t, f.eu), clusterRegistrar(t, f.us)
	opts = append([]console.Option{console.WithLogger(slog.New(slog.NewTextHandler(f.log, nil))),
		console.WithRelistInterval(200 * time.Millisecond), console.WithAdminToken(adminToken)}, opts...)
	srv, err := console.NewClusters([]console.Cluster{
		{Name: "us", Store: etcdStore(t, f.usCli, etcd.WithLogger(slog.New(slog.NewTextHandler(f.log, nil))))},
		{Name: "eu", Region: "eu-1", Store: etcdStore(t, f.euCli, etcd.WithLogger(slog.New(slog.NewTextHandler(f.log, nil))))},
	}, opts...)
	if err != nil {
		t.Fatalf("console.NewClusters: %v", err)
	}
	f.url = serveConsole(t, srv)
	return f
}

func clusterRegistrar(t *testing.T, c *etcdtest.Cluster) *etcd.Registrar {
	t.Helper()
	r, err := etcd.NewRegistrar(c.Client(t), etcd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("NewRegistrar: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func registerWith(t *testing.T, r *etcd.Registrar, in registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.Register(ctx, in); err != nil {
		t.Fatalf("Register %s/%s: %v", in.Name, in.ID, err)
	}
}

// clusterServiceState is what these tests read of a service page's state.
type clusterServiceState struct {
	Instances []struct {
		ID           string            `json:"id"`
		Addr         string            `json:"addr"`
		Cluster      string            `json:"cluster"`
		Region       string            `json:"region"`
		Override     bool              `json:"override"`
		Metadata     map[string]string `json:"metadata"`
		LeaseExpires string            `json:"leaseExpires"`
	} `json:"instances"`
	Canary   *registry.Canary `json:"canary"`
	Policy   json.RawMessage  `json:"policy"`
	Clusters []struct {
		Name         string           `json:"name"`
		Region       string           `json:"region"`
		Stale        bool             `json:"stale"`
		StaleSince   string           `json:"staleSince"`
		Instances    int              `json:"instances"`
		Canary       *registry.Canary `json:"canary"`
		Policy       json.RawMessage  `json:"policy"`
		PolicyFields []struct{ Name, Value string }
	} `json:"clusters"`
	History []struct {
		Action, Instance, Cluster string
	} `json:"history"`
}

// clusterFleetState is what these tests read of the services page's state.
type clusterFleetState struct {
	Services []struct {
		Name      string         `json:"name"`
		Instances int            `json:"instances"`
		Clusters  map[string]int `json:"clusters"`
	} `json:"services"`
	Clusters []struct {
		Name       string `json:"name"`
		Region     string `json:"region"`
		State      string `json:"state"`
		StaleSince string `json:"staleSince"`
		Error      string `json:"error"`
		Services   int    `json:"services"`
	} `json:"clusters"`
}

// health renders the services page's clusters as "eu=fresh us=stale".
func (s clusterFleetState) health() string {
	var parts []string
	for _, c := range s.Clusters {
		parts = append(parts, c.Name+"="+c.State)
	}
	return strings.Join(parts, " ")
}

// stream is an open event stream of a console page, read as states of
// type T.
type stream[T any] struct {
	t      *testing.T
	events <-chan ssetest.Event
	last   string
}

// follow opens the stream at url.
func follow[T any](t *testing.T, url string) *stream[T] {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &stream[T]{t: t, events: ssetest.Open(ctx, t, url, nil)}
}

// wait waits up to waitTimeout for a state that ok accepts.
func (s *stream[T]) wait(what string, ok func(T) bool) T {
	s.t.Helper()
	return s.waitWithin(what, waitTimeout, ok)
}

// waitWithin waits up to within for a state that ok accepts.
func (s *stream[T]) waitWithin(what string, within time.Duration, ok func(T) bool) T {
	s.t.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		select {
		case ev, open := <-s.events:
			if !open {
				s.t.Fatalf("%s: the stream ended; last state %s", what, s.last)
			}
			if ev.Name != "state" {
				continue
			}
			s.last = ev.Data
			var v T
			if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
				s.t.Fatalf("decode %s: %v", ev.Data, err)
			}
			if ok(v) {
				return v
			}
		case <-timeout.C:
			s.t.Fatalf("%s: not within %v; last state %s", what, within, s.last)
		}
	}
}

// The pages over two clusters: every instance with its cluster (an ID in
// both is two instances), the cluster's region where the instance set
// none, each cluster's part and health.
func TestConsoleClustersViews(t *testing.T) {
	f := newTwoClusters(t)
	registerWith(t, f.euReg, registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9000", Metadata: map[string]string{"k": "v"}})
	registerWith(t, f.usReg, registry.Instance{ID: "user-1", Name: "user", Addr: "10.1.0.1:9000", Region: "us-1"})
	registerWith(t, f.usReg, registry.Instance{ID: "user-2", Name: "user", Addr: "10.1.0.2:9000", Region: "us-1"})
	registerWith(t, f.usReg, registry.Instance{ID: "pay-1", Name: "pay", Addr: "10.1.0.3:9000"})

	svc := follow[clusterServiceState](t, f.url+"api/service/events?name=user")
	st := svc.wait("both clusters' instances", func(s clusterServiceState) bool { return len(s.Instances) == 3 })
	got := []string{}
	for _, in := range st.Instances {
		got = append(got, in.ID+"@"+in.Cluster+"/"+in.Region+"/"+in.Addr)
		if _, ok := in.Metadata[registry.ClusterKey]; ok {
			t.Errorf("instance %s@%s: metadata %v carries the cluster key", in.ID, in.Cluster, in.Metadata)
		}
		if in.LeaseExpires == "" {
			t.Errorf("instance %s@%s: no lease expiry", in.ID, in.Cluster)
		}
	}
	if want := "user-1@eu/eu-1/10.0.0.1:9000 user-1@us/us-1/10.1.0.1:9000 user-2@us/us-1/10.1.0.2:9000"; strings.Join(got, " ") != want {
		t.Fatalf("instances %s, want %s", strings.Join(got, " "), want)
	}
	if len(st.Clusters) != 2 || st.Clusters[0].Name != "eu" || st.Clusters[0].Region != "eu-1" || st.Clusters[0].Instances != 1 ||
		st.Clusters[1].Name != "us" || st.Clusters[1].Instances != 2 || st.Clusters[0].Stale || st.Clusters[1].Stale {
		t.Fatalf("clusters %+v, want eu (eu-1, 1 instance) and us (2), both fresh", st.Clusters)
	}

	fleet := follow[clusterFleetState](t, f.url+"api/services/events")
	fs := fleet.wait("both services, both clusters fresh", func(s clusterFleetState) bool {
		// Each cluster's listing ends on its own: the counts are final
		// once both have.
		return len(s.Services) == 2 && s.Services[0].Instances == 1 && s.Services[1].Instances == 3 && s.health() == "eu=fresh us=fresh" &&
			s.Clusters[0].Services == 1 && s.Clusters[1].Services == 2
	})
	if fs.Services[0].Name != "pay" || fs.Services[0].Clusters["eu"] != 0 || fs.Services[0].Clusters["us"] != 1 ||
		fs.Services[1].Name != "user" || fs.Services[1].Clusters["eu"] != 1 || fs.Services[1].Clusters["us"] != 2 {
		t.Fatalf("services %+v, want pay eu:0 us:1, user eu:1 us:2", fs.Services)
	}
	if fs.Clusters[0].Region != "eu-1" || fs.Clusters[0].Services != 1 || fs.Clusters[1].Services != 2 {
		t.Fatalf("clusters %+v, want eu (eu-1) with 1 service, us with 2", fs.Clusters)
	}
}

// Actions and policy edits write to the cluster they name, and only
// there; a request over several clusters that names none, or an unknown
// one, is refused.
func TestConsoleClustersWriteTheirCluster(t *testing.T) {
	f := newTwoClusters(t)
	registerWith(t, f.euReg, registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9000"})
	registerWith(t, f.usReg, registry.Instance{ID: "user-1", Name: "user", Addr: "10.1.0.1:9000"})
	c := newClient(t, f.url)
	c.loginWithToken()

	drain := map[string]any{"action": "drain", "service": "user", "ids": []string{"user-1"}}
	for _, tc := range []struct {
		cluster, want string
	}{
		{"", "this console reads several clusters: name one (cluster)"},
		{"asia", `no cluster "asia"`},
	} {
		req := map[string]any{"cluster": tc.cluster}
		for k, v := range drain {
			req[k] = v
		}
		if code, body := c.post("action", req); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("drain with cluster %q: %d %q, want 400 and %q", tc.cluster, code, body, tc.want)
		}
	}
	drain["cluster"] = "us"
	if code, body := c.post("action", drain); code != http.StatusOK || !strings.Contains(body, `"done":1`) {
		t.Fatalf("drain in us: %d %s", code, body)
	}
	if eu, us := overrideIn(t, f.euCli, "user", "user-1"), overrideIn(t, f.usCli, "user", "user-1"); eu != "" || us == "" {
		t.Fatalf("after the drain in us: eu's override %q (want none), us's %q (want one)", eu, us)
	}
	if code, body := c.post("policy", map[string]any{"service": "user", "cluster": "eu", "set": []string{"timeout=800ms"}}); code != http.StatusOK {
		t.Fatalf("policy in eu: %d %s", code, body)
	}
	if code, body := c.post("policy", map[string]any{"service": "user", "set": []string{"timeout=1s"}}); code != http.StatusBadRequest {
		t.Fatalf("policy with no cluster: %d %s, want 400", code, body)
	}
	svc := follow[clusterServiceState](t, f.url+"api/service/events?name=user")
	st := svc.wait("us's user-1 overridden, eu's policy, each in its cluster", func(s clusterServiceState) bool {
		return len(s.Instances) == 2 && s.Instances[1].Override && len(s.Clusters) == 2 && s.Clusters[0].Policy != nil && len(s.History) >= 2
	})
	if st.Instances[0].Override || st.Clusters[1].Policy != nil || st.Policy != nil || st.Canary != nil {
		t.Fatalf("eu's user-1 overridden %v, us's policy %s, top-level policy %s canary %v; want none of them",
			st.Instances[0].Override, st.Clusters[1].Policy, st.Policy, st.Canary)
	}
	if pf := st.Clusters[0].PolicyFields; len(pf) != 1 || pf[0].Name != "timeout" || pf[0].Value != "800ms" {
		t.Fatalf("eu's policy fields %+v, want timeout 800ms", pf)
	}
	clustersOf := map[string]string{}
	for _, h := range st.History {
		clustersOf[h.Action] = h.Cluster
	}
	if clustersOf["drain"] != "us" || clustersOf["policy set"] != "eu" && clustersOf["set policy"] != "eu" {
		t.Logf("history %+v", st.History)
	}
	if clustersOf["drain"] != "us" {
		t.Fatalf("history %+v: the drain is not us's", st.History)
	}
	if !strings.Contains(f.log.String(), "cluster=us") {
		t.Fatalf("the action's log line does not name its cluster:\n%s", f.log.String())
	}
}

// One cluster partitioned (its member stalls every byte): the services page
// tells it stale, with since when, its instances stay listed, and the other
// cluster's changes reach the pages meanwhile; healed, it is fresh again.
// A cluster that does not answer at the start is unreachable, and joins
// when it answers.
func TestConsoleClusterStaleAndUnreachable(t *testing.T) {
	f := newTwoClusters(t)
	registerWith(t, f.euReg, registry.Instance{ID: "eu-a", Name: "user", Addr: "10.0.0.1:9000"})
	registerWith(t, f.usReg, registry.Instance{ID: "us-a", Name: "user", Addr: "10.1.0.1:9000"})
	registerWith(t, f.usReg, registry.Instance{ID: "pay-1", Name: "pay", Addr: "10.1.0.2:9000"})
	fleet := follow[clusterFleetState](t, f.url+"api/services/events")
	fleet.wait("both fresh", func(s clusterFleetState) bool { return s.health() == "eu=fresh us=fresh" && len(s.Services) == 2 })
	svc := follow[clusterServiceState](t, f.url+"api/service/events?name=user")
	svc.wait("both instances", func(s clusterServiceState) bool { return len(s.Instances) == 2 })

	m := f.us.Members()[0]
	m.Stall()
	t.Cleanup(m.Heal)
	stalled := time.Now()
	fs := fleet.wait("us stale", func(s clusterFleetState) bool { return s.health() == "eu=fresh us=stale" })
	t.Logf("us stale on the services page %v after the stall: since %s, %s", time.Since(stalled).Round(time.Millisecond), fs.Clusters[1].StaleSince, fs.Clusters[1].Error)
	if fs.Clusters[1].StaleSince == "" {
		t.Fatalf("us stale with no time: %+v", fs.Clusters[1])
	}
	svc.wait("us's part stale, its instance kept", func(s clusterServiceState) bool {
		return len(s.Instances) == 2 && len(s.Clusters) == 2 && s.Clusters[1].Stale && s.Clusters[1].StaleSince != "" && !s.Clusters[0].Stale
	})
	// eu's changes reach both pages while us is stalled, in rounds spread
	// over its listings' 5 s timeouts. Bounds: a change through a fresh
	// cluster takes milliseconds (logged below); one held back by the
	// stalled cluster's reads would take seconds.
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("eu-b%d", i)
		start := time.Now()
		registerWith(t, f.euReg, registry.Instance{ID: id, Name: "user", Addr: fmt.Sprintf("10.0.0.2:%d", 9000+i)})
		svc.waitWithin(id+" on the service page", 3*time.Second, func(s clusterServiceState) bool { return len(s.Instances) == 2+i })
		onService := time.Since(start)
		// pay, listed by us alone, stays listed while us does not answer.
		fleet.waitWithin(id+" on the services page", 3*time.Second, func(s clusterFleetState) bool {
			return len(s.Services) == 2 && s.Services[0].Name == "pay" && s.Services[0].Clusters["us"] == 1 &&
				s.Services[1].Clusters["eu"] == 1+i && s.Services[1].Clusters["us"] == 1
		})
		t.Logf("us stalled: eu's change %s on the service page after %v, on the services page after %v",
			id, onService.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		pace := time.NewTimer(1500 * time.Millisecond) // spreads the rounds over the fault; no state is awaited
		<-pace.C
	}
	// A service page opened while us is stalled opens at once: eu lists
	// user, so us's listing (up to its 5 s timeout) is not awaited. Bound:
	// 3 s, against the 5 s an awaited listing would take. Whether pay,
	// listed by us alone, exists is unknown: 503 naming us, not 404.
	start := time.Now()
	openCtx, cancelOpen := context.WithTimeout(context.Background(), 3*time.Second)
	ssetest.First(openCtx, t, f.url+"api/service/events?name=user", nil, "state")
	cancelOpen()
	t.Logf("us stalled: a service page of user opened in %v", time.Since(start).Round(time.Millisecond))
	resp, err := http.Get(f.url + "api/service/events?name=pay")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "cluster us:") {
		t.Fatalf("pay's page with us stalled: %s %q, want 503 naming cluster us", resp.Status, body)
	}
	m.Heal()
	fleet.wait("us fresh again", func(s clusterFleetState) bool { return s.health() == "eu=fresh us=fresh" })

	// A third console, with us refusing every connection from the start.
	m.Reset()
	srv, err := console.NewClusters([]console.Cluster{{Name: "eu", Store: etcdStore(t, f.euCli, etcd.WithRequestTimeout(time.Second))}, {Name: "us", Store: etcdStore(t, f.us.Client(t), etcd.WithRequestTimeout(time.Second))}},
		console.WithRelistInterval(200*time.Millisecond), console.WithRequestTimeout(time.Second), console.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	late := follow[clusterFleetState](t, serveConsole(t, srv)+"api/services/events")
	fs = late.wait("eu listed, us unreachable", func(s clusterFleetState) bool {
		return s.health() == "eu=fresh us=unreachable" && len(s.Services) == 1 && s.Services[0].Clusters["eu"] == 4
	})
	t.Logf("us unreachable: %s", fs.Clusters[1].Error)
	m.Heal()
	late.wait("us joined", func(s clusterFleetState) bool {
		return s.health() == "eu=fresh us=fresh" && len(s.Services) == 2 && s.Services[1].Clusters["us"] == 1
	})
}

// NewClusters refuses what cannot work, naming it.
func TestNewClustersErrors(t *testing.T) {
	c := etcdtest.Start(t)
	store := etcdStore(t, c.Client(t))
	gz, err := legacy.NewGoZero()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		clusters []console.Cluster
		opts     []console.Option
		want     string
	}{
		{nil, nil, "no cluster given"},
		{[]console.Cluster{{Name: "eu", Store: store}, {Name: "eu", Store: store}}, nil, `cluster name "eu" used twice`},
		{[]console.Cluster{{Name: "", Store: store}}, nil, "empty cluster name"},
		{[]console.Cluster{{Name: "eu"}}, nil, `cluster 0 ("eu"): nil store`},
		{[]console.Cluster{{Name: "eu", Store: store}}, []console.Option{console.WithLegacy("go-zero", gz)}, "WithLegacy"},
	} {
		if _, err := console.NewClusters(tc.clusters, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewClusters(%+v): %v, want an error with %q", tc.clusters, err, tc.want)
		}
	}
}
