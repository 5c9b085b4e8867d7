package console_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/legacy"
	"github.com/musterhq/muster/registry/zookeeper"
)

// zkServiceState is what the ZooKeeper test reads of a service page's
// state.
type zkServiceState struct {
	Instances []struct {
		ID           string `json:"id"`
		Draining     bool   `json:"draining"`
		Override     bool   `json:"override"`
		LeaseExpires string `json:"leaseExpires"`
	} `json:"instances"`
	Policy    json.RawMessage `json:"policy"`
	NoHistory bool            `json:"noHistory"`
	NoLeases  bool            `json:"noLeases"`
}

// The console runs on a ZooKeeper Store as on etcd's: the services page
// lists the services registered in ZooKeeper, a drain and a policy edit
// made through the console's API land in ZooKeeper (a Discovery of its
// own sees the instance draining), and the service page says that the
// registry keeps no history and shows no lease times, which ZooKeeper
// does not have. WithLegacy, which reads etcd layouts, is refused.
func TestConsoleOnZooKeeper(t *testing.T) {
	zk := zktest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	zkOpts := []zookeeper.Option{zookeeper.WithLogger(quiet), zookeeper.WithSessionTimeout(5 * time.Second)}
	store, err := zookeeper.Open(zk.Addrs(), zkOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, in := range []registry.Instance{instance("payments", 9001, "eu-1a", "v1", nil), instance("payments", 9002, "eu-1b", "v1", nil)} {
		if err := store.Registrar().Register(ctx, in); err != nil {
			t.Fatalf("Register %s: %v", in.Addr, err)
		}
	}

	gz, err := legacy.NewGoZero()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := console.New(store, console.WithLegacy("go-zero", gz)); err == nil || !strings.Contains(err.Error(), "*etcd.Store") {
		t.Errorf("New over ZooKeeper with WithLegacy: %v, want an error saying it needs an *etcd.Store", err)
	}
	logs := &logBuffer{}
	srv, err := console.New(store, console.WithAdminToken(adminToken), console.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		console.WithRelistInterval(200*time.Millisecond))
	if err != nil {
		t.Fatalf("console.New: %v", err)
	}
	url := serveConsole(t, srv)

	services := follow[clusterFleetState](t, url+"api/services/events")
	services.wait("payments listed with 2 instances", func(s clusterFleetState) bool {
		return len(s.Services) == 1 && s.Services[0].Name == "payments" && s.Services[0].Instances == 2
	})
	page := follow[zkServiceState](t, url+"api/service/events?name=payments")
	st := page.wait("both instances", func(s zkServiceState) bool { return len(s.Instances) == 2 })
	if !st.NoHistory || !st.NoLeases || st.Instances[0].LeaseExpires != "" {
		t.Errorf("state %+v: want no history and no lease times from ZooKeeper", st)
	}

	// A drain and a policy edit through the console's API.
	c := newClient(t, url)
	c.loginWithToken()
	code, body := c.post("action", map[string]any{"action": "drain", "service": "payments", "ids": []string{"10.0.0.1:9001"}})
	if code != http.StatusOK || !strings.Contains(body, `"done":1`) {
		t.Fatalf("drain: %d %s", code, body)
	}
	// Another client of ZooKeeper sees it.
	d, err := zookeeper.NewDiscovery(zk.Addrs(), zkOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	w, err := d.Watch(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for {
		snap := w.Snapshot()
		if in := instanceByID(snap.Instances, "10.0.0.1:9001"); in != nil && in.Draining {
			break
		}
		select {
		case <-w.Updates():
		case <-ctx.Done():
			t.Fatalf("a Discovery of ZooKeeper never saw 10.0.0.1:9001 drained: %+v", w.Snapshot())
		}
	}
	page.wait("9001 draining by an override", func(s zkServiceState) bool {
		for _, in := range s.Instances {
			if in.ID == "10.0.0.1:9001" {
				return in.Draining && in.Override
			}
		}
		return false
	})
	code, body = c.post("policy", map[string]any{"service": "payments", "set": []string{"timeout=800ms"}})
	if code != http.StatusOK {
		t.Fatalf("policy set: %d %s", code, body)
	}
	if p, ok, err := zookeeper.GetPolicy(ctx, zk.Addrs(), "payments", zkOpts...); err != nil || !ok || p.Timeout != 800*time.Millisecond {
		t.Errorf("ZooKeeper's policy of payments: %+v %v %v, want timeout 800ms", p, ok, err)
	}
	page.wait("the policy followed", func(s zkServiceState) bool { return strings.Contains(string(s.Policy), `"800ms"`) })
	if strings.Contains(logs.String(), "level=ERROR") || strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("console log:\n%s\nwant no warning or error", logs)
	}

	// The pages: the service listed, and its page without a lease column,
	// saying that the registry keeps no history.
	b := browsertest.Start(t)
	b.Do(browsertest.Timeout, "services page lists payments with 2 instances",
		chromedp.Navigate(url),
		browsertest.WaitJS(`(() => { const r = document.querySelector('#services tr[data-service="payments"]');
			return r && r.querySelector('.count').textContent === '2'; })()`),
	)
	b.Do(browsertest.Timeout, "service page: 9001 draining, no lease column, no history kept",
		chromedp.Navigate(url+"?name=payments"),
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+` !== null && `+rowJS("10.0.0.1:9001")+`.querySelector('.drain-state').textContent === 'draining'`),
		browsertest.WaitJS(`!document.querySelector('#no-journal').hidden && document.querySelector('#history').hidden`),
		browsertest.WaitJS(`[...document.querySelectorAll('#service-view .lease-col')].every((e) => e.hidden)`),
	)
	if got := b.Text("#no-journal"); !strings.Contains(got, "keeps no history") {
		t.Errorf("#no-journal = %q", got)
	}
	b.Screenshot("zookeeper-service")
}

// instanceByID returns the instance of ins with that ID, or nil.
func instanceByID(ins []*registry.Instance, id string) *registry.Instance {
	for _, in := range ins {
		if in.ID == id {
			return in
		}
	}
	return nil
}
