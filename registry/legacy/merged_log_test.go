package legacy_test

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/syncbuf"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// matching returns the lines of logs that contain s.
func matching(logs *syncbuf.Buffer, s string) []string {
	return regexp.MustCompile(`(?m)^.*`+regexp.QuoteMeta(s)+`.*$`).FindAllString(logs.String(), -1)
}

// After an outage, each part of a merged Discovery logs that its watch
// resumed; the line of a legacy part names its layout and the key prefix
// it reads, so that the two lines of one service are not the same.
func TestMergedPartsSayWhichLayoutTheyLog(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 60*time.Second)
	var logs syncbuf.Buffer
	log := etcd.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	primary, err := etcd.NewDiscovery(cli, etcdopts.Discovery(log)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	g, _, _ := mustLayouts(t, legacy.WithName("user", "user.rpc"))
	gz, err := etcd.NewDiscovery(cli, etcdopts.Discovery(log, etcd.WithLayout(g))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gz.Close() })
	m, err := legacy.NewMerged(primary, legacy.Source{Name: "go-zero", Discovery: gz})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })

	v, err := registry.Marshal(registry.Instance{Name: "user", ID: "u1", Addr: "127.0.0.1:9001"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, registry.Key(registry.DefaultPrefix, "user", "u1"), string(v)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "user.rpc/7", "127.0.0.1:9002"); err != nil {
		t.Fatal(err)
	}
	w := watch(t, ctx, m, "user")
	registrytest.WaitFor(t, w, "both instances", registrytest.HasIDs("7", "u1"))

	member := c.Members()[0]
	member.Stop(t)
	registrytest.WaitFor(t, w, "stale while etcd is stopped", func(s registry.Snapshot) bool { return s.Stale() })
	member.Restart(t)
	registrytest.WaitForWithin(t, w, 20*time.Second, "fresh after the restart", func(s registry.Snapshot) bool { return !s.Stale() })

	// A change in each part after the restart: a part's goroutine logs
	// its recovery before it applies later events, so once the merge
	// shows both, both lines are written.
	v2, err := registry.Marshal(registry.Instance{Name: "user", ID: "u2", Addr: "127.0.0.1:9003"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, registry.Key(registry.DefaultPrefix, "user", "u2"), string(v2)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "user.rpc/8", "127.0.0.1:9004"); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the changes after the restart", registrytest.HasIDs("7", "8", "u1", "u2"))
	lines := matching(&logs, "watch resumed")
	if len(lines) != 2 {
		t.Fatalf("%d lines say the watch resumed, want one per part:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var legacyLines int
	for _, l := range lines {
		if strings.Contains(l, `layout=go-zero prefix=user.rpc/`) {
			legacyLines++
		} else if strings.Contains(l, "layout=") {
			t.Errorf("Muster's part names a layout: %s", l)
		}
	}
	if legacyLines != 1 {
		t.Fatalf("want exactly one of the lines naming layout=go-zero prefix=user.rpc/:\n%s", strings.Join(lines, "\n"))
	}
	t.Logf("%s", strings.Join(lines, "\n"))
}
