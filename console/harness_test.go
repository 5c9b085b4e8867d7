package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// waitTimeout bounds every wait of these tests that has no tighter bound.
const waitTimeout = 30 * time.Second

// adminToken is the admin token of the consoles in admin mode.
const adminToken = "test-admin-token-0123456789"

// logBuffer collects a console's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// fixture is a registry in a real etcd, a console on it served over HTTP,
// and a registrar to add instances.
type fixture struct {
	t       testing.TB
	cluster *etcdtest.Cluster
	cli     *clientv3.Client
	reg     *etcd.Registrar
	url     string // the console's base URL, ending in /ui/
	log     *logBuffer
}

func newFixture(t testing.TB, opts ...console.Option) *fixture {
	t.Helper()
	return newFixtureOn(t, etcdtest.Start(t), opts...)
}

// newFixtureOn is newFixture on the cluster c.
func newFixtureOn(t testing.TB, c *etcdtest.Cluster, opts ...console.Option) *fixture {
	t.Helper()
	cli := c.Client(t)
	reg, err := etcd.NewRegistrar(c.Client(t), etcd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("NewRegistrar: %v", err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	opts = append([]console.Option{console.WithLogger(log),
		console.WithRelistInterval(200 * time.Millisecond)}, opts...)
	srv, err := console.New(etcdStore(t, cli, etcd.WithLogger(log)), opts...)
	if err != nil {
		t.Fatalf("console.New: %v", err)
	}
	return &fixture{t: t, cluster: c, cli: cli, reg: reg, url: serveConsole(t, srv), log: logs}
}

// etcdStore is the registry in the etcd cluster cli reaches, closed at the
// end of the test (cli stays open).
func etcdStore(t testing.TB, cli *clientv3.Client, opts ...etcd.StoreOption) *etcd.Store {
	t.Helper()
	s, err := etcd.NewStore(cli, opts...)
	if err != nil {
		t.Fatalf("etcd.NewStore: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// serveConsole serves srv under /ui/ over HTTP until the end of the test,
// and returns its base URL, ending in /ui/.
func serveConsole(t testing.TB, srv *console.Server) string {
	mux := http.NewServeMux()
	mux.Handle("/ui/", srv)
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		_ = srv.Close()
		hs.Close()
	})
	return hs.URL + "/ui/"
}

func (f *fixture) register(in registry.Instance) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := f.reg.Register(ctx, in); err != nil {
		f.t.Fatalf("Register %s/%s: %v", in.Name, in.ID, err)
	}
}

// overrideKV reads the override key of one instance from etcd; nil if
// none.
func (f *fixture) overrideKV(service, id string) *mvccpb.KeyValue {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := f.cli.Get(ctx, registry.OverrideKey(registry.DefaultPrefix, service, id))
	if err != nil {
		f.t.Fatalf("read override of %s/%s: %v", service, id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// override reads the override value of one instance from etcd; "" if none.
func (f *fixture) override(service, id string) string {
	f.t.Helper()
	if kv := f.overrideKV(service, id); kv != nil {
		return string(kv.Value)
	}
	return ""
}

// history reads the journal of service (muster history), newest first.
func (f *fixture) history(service string) []registry.Record {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	recs, err := etcd.History(ctx, f.cli, service, 0)
	if err != nil {
		f.t.Fatalf("read the journal of %s: %v", service, err)
	}
	return recs
}

// overrideRevision is the revision at which the override of one instance
// was last written; 0 if there is none.
func (f *fixture) overrideRevision(service, id string) int64 {
	f.t.Helper()
	if kv := f.overrideKV(service, id); kv != nil {
		return kv.ModRevision
	}
	return 0
}
