package etcd_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// A journal record of another schema version (a later release's, in a
// mixed fleet or after a rollback) is left out of History; the records
// this release reads are all there (docs/UPGRADING.md).
func TestHistorySkipsRecordsOfAnotherVersion(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	if err := etcd.SetCanary(ctx, cli, "svc", registry.Canary{Color: "blue", Percent: 5}, writes("/p", etcd.WithBy("alice"))...); err != nil {
		t.Fatal(err)
	}
	later := `{"v":2,"seq":1,"time":"2026-12-04T02:30:00Z","who":"bob","source":"command","action":"canary",` +
		`"service":"svc","before":null,"after":null}`
	if _, err := cli.Put(ctx, registry.JournalSlotKey("/p", "svc", 1), later); err != nil {
		t.Fatal(err)
	}
	recs, err := etcd.History(ctx, cli, "svc", 0, at("/p")...)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Who != "alice" || recs[0].Action != registry.ActionCanary {
		t.Fatalf("History = %+v, want alice's canary record alone", recs)
	}
}
