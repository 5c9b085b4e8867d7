package zookeeper_test

import (
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"

	"github.com/musterhq/muster/registry/zookeeper"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.LeakOptions()...) }

// quiet discards the library's logs; failures are reported by assertions.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fast returns options with short timers for tests, under root.
func fast(root string, extra ...zookeeper.Option) []zookeeper.Option {
	return append([]zookeeper.Option{
		zookeeper.WithRoot(root), zookeeper.WithLogger(quiet),
		zookeeper.WithSessionTimeout(5 * time.Second), zookeeper.WithAuditInterval(time.Second),
	}, extra...)
}

func newRegistrar(t *testing.T, servers []string, opts ...zookeeper.Option) *zookeeper.Registrar {
	t.Helper()
	r, err := zookeeper.NewRegistrar(servers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newDiscovery(t *testing.T, servers []string, opts ...zookeeper.Option) *zookeeper.Discovery {
	t.Helper()
	d, err := zookeeper.NewDiscovery(servers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// rawConn is a plain client of the servers, closed with the test.
func rawConn(t testing.TB, servers []string) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for range events {
		}
	})
	return c
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// rawNodes lists the instance nodes of a service and the session owning
// each, read directly.
func rawNodes(t testing.TB, c *zk.Conn, root, service string) (ids []string, owners map[string]int64) {
	t.Helper()
	p := root + "/" + service
	// Reads are served by the server the client is connected to, which
	// may lag: catch up with the leader first.
	if _, err := c.Sync(p); err != nil && err != zk.ErrNoNode {
		t.Fatalf("sync %s: %v", p, err)
	}
	kids, _, err := c.Children(p)
	if err == zk.ErrNoNode {
		return nil, nil
	}
	if err != nil {
		t.Fatalf("children of %s: %v", p, err)
	}
	owners = map[string]int64{}
	for _, k := range kids {
		_, st, err := c.Get(p + "/" + k)
		if err == zk.ErrNoNode {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, k)
		owners[k] = st.EphemeralOwner
	}
	sort.Strings(ids)
	return ids, owners
}
