package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/osuser"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// valueAt reads key at revision rev: its value, nil when absent.
func valueAt(t *testing.T, cli *clientv3.Client, key string, rev int64) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key, clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("get %s at %d: %v", key, rev, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0].Value
}

// sameJSON reports whether a stored value (nil: absent) is what a record
// holds (null: absent).
func sameJSON(stored []byte, rec json.RawMessage) bool {
	if stored == nil {
		return string(rec) == "null"
	}
	return string(stored) == string(rec)
}

// changedKey is the key an operator write of rec changes.
func changedKey(prefix string, rec registry.Record) string {
	switch rec.Action {
	case registry.ActionDrain, registry.ActionWeight, registry.ActionUndrain:
		return registry.OverrideKey(prefix, rec.Service, rec.Instance)
	case registry.ActionDeregister:
		return registry.Key(prefix, rec.Service, rec.Instance)
	case registry.ActionCanary, registry.ActionCanaryOff:
		return registry.CanaryKey(prefix, rec.Service)
	default:
		return registry.PolicyKey(prefix, rec.Service)
	}
}

// checkSameRevision checks that each record landed with its change: read
// at the record's revision, the changed key holds the record's after, and
// one revision earlier its before. A record written in a transaction of
// its own would find the change already made one revision earlier (or
// not yet made at its own).
func checkSameRevision(t *testing.T, cli *clientv3.Client, prefix string, recs []registry.Record) {
	t.Helper()
	for _, rec := range recs {
		key := changedKey(prefix, rec)
		if at := valueAt(t, cli, key, rec.Revision); !sameJSON(at, rec.After) {
			t.Errorf("record %d (%s) at revision %d: %s holds %q, the record's after is %s", rec.Seq, rec.Action, rec.Revision, key, at, rec.After)
		}
		if before := valueAt(t, cli, key, rec.Revision-1); !sameJSON(before, rec.Before) {
			t.Errorf("record %d (%s) at revision %d: %s held %q one revision earlier, the record's before is %s", rec.Seq, rec.Action, rec.Revision-1, key, before, rec.Before)
		}
	}
}

// Every traced write leaves one record, in the same transaction as the
// change: who, from where, what, before and after; a clear of nothing
// writes nothing.
func TestEveryOperatorWriteIsTracedInItsTransaction(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	const p = "/p"
	r := newRegistrar(t, cli, reg(p)...)
	ctx := ctxFor(t, 30*time.Second)
	if err := r.Register(ctx, instance("svc", "a", 9001)); err != nil {
		t.Fatal(err)
	}
	alice := []etcd.WriteOption{etcd.WithPrefix(p), etcd.WithBy("alice"), etcd.WithSource(registry.SourceConsole)}
	lib := []etcd.WriteOption{etcd.WithPrefix(p)}
	zero, fifty := 0, 50
	steps := []struct {
		action string
		opts   []etcd.WriteOption
		write  func(opts []etcd.WriteOption) error
	}{
		{registry.ActionDrain, alice, func(o []etcd.WriteOption) error {
			return etcd.SetOverride(ctx, cli, "svc", "a", registry.Override{Weight: &zero}, o...)
		}},
		{registry.ActionWeight, lib, func(o []etcd.WriteOption) error {
			return etcd.SetOverride(ctx, cli, "svc", "a", registry.Override{Weight: &fifty}, o...)
		}},
		{registry.ActionUndrain, alice, func(o []etcd.WriteOption) error { return etcd.ClearOverride(ctx, cli, "svc", "a", o...) }},
		{"", alice, func(o []etcd.WriteOption) error { return etcd.ClearOverride(ctx, cli, "svc", "a", o...) }}, // nothing to clear
		{registry.ActionCanary, alice, func(o []etcd.WriteOption) error {
			return etcd.SetCanary(ctx, cli, "svc", registry.Canary{Color: "blue", Percent: 5}, o...)
		}},
		{registry.ActionCanary, lib, func(o []etcd.WriteOption) error {
			return etcd.SetCanary(ctx, cli, "svc", registry.Canary{Color: "blue", Percent: 20}, o...)
		}},
		{registry.ActionCanaryOff, alice, func(o []etcd.WriteOption) error { return etcd.ClearCanary(ctx, cli, "svc", o...) }},
		{"", alice, func(o []etcd.WriteOption) error { return etcd.ClearCanary(ctx, cli, "svc", o...) }},
		{registry.ActionPolicySet, alice, func(o []etcd.WriteOption) error {
			return etcd.SetPolicy(ctx, cli, "svc", registry.Policy{Timeout: time.Second}, o...)
		}},
		{registry.ActionPolicyClear, lib, func(o []etcd.WriteOption) error { return etcd.ClearPolicy(ctx, cli, "svc", o...) }},
		{"", lib, func(o []etcd.WriteOption) error { return etcd.ClearPolicy(ctx, cli, "svc", o...) }},
		{registry.ActionDeregister, alice, func(o []etcd.WriteOption) error { return etcd.Delete(ctx, cli, "svc", "a", o...) }},
	}
	var want []string // the actions recorded, oldest first
	for _, s := range steps {
		if err := s.write(s.opts); err != nil {
			t.Fatalf("%s: %v", s.action, err)
		}
		if s.action != "" {
			want = append(want, s.action)
		}
	}
	if err := etcd.Delete(ctx, cli, "svc", "gone", lib...); err != nil {
		t.Fatalf("Delete of an instance not registered: %v", err)
	}
	// An instance not registered: nothing written, nothing traced.
	if err := etcd.SetOverride(ctx, cli, "svc", "gone", registry.Override{Weight: &zero}, lib...); !errors.Is(err, etcd.ErrNoInstance) {
		t.Fatalf("SetOverride of an instance not registered: %v, want ErrNoInstance", err)
	}

	recs, err := etcd.History(ctx, cli, "svc", 0, etcd.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d (%v): %+v", len(recs), len(want), want, recs)
	}
	me := osuser.Name()
	for i, rec := range recs {
		j := len(want) - 1 - i // newest first
		if rec.Action != want[j] || rec.Seq != uint64(j) || rec.Service != "svc" {
			t.Errorf("record %d: %s seq %d of %s, want %s seq %d", i, rec.Action, rec.Seq, rec.Service, want[j], j)
		}
		switch rec.Who {
		case "alice":
			if rec.Source != registry.SourceConsole {
				t.Errorf("record %d by alice from %q, want console", i, rec.Source)
			}
		case me:
			if rec.Source != registry.SourceLibrary {
				t.Errorf("record %d by %s from %q, want library", i, me, rec.Source)
			}
		default:
			t.Errorf("record %d by %q, want alice or the OS user %q", i, rec.Who, me)
		}
		if time.Since(rec.Time) > time.Minute || rec.Time.Location() != time.UTC {
			t.Errorf("record %d at %v, want now in UTC", i, rec.Time)
		}
	}
	// Spot checks of before and after; checkSameRevision checks them all
	// against the store.
	if drain := recs[len(recs)-1]; string(drain.Before) != "null" || !strings.Contains(string(drain.After), `"weight":0`) || drain.Instance != "a" {
		t.Errorf("the drain's record %+v: want before null, after weight 0, instance a", drain)
	}
	if b, a := recs[len(recs)-2].Describe(); b != "weight 0" || a != "weight 50" {
		t.Errorf("the weight's record says %q -> %q, want weight 0 -> weight 50", b, a)
	}
	if b, a := recs[len(recs)-5].Describe(); b != "blue 5%" || a != "blue 20%" {
		t.Errorf("the second canary's record says %q -> %q", b, a)
	}
	if b, a := recs[0].Describe(); b != "127.0.0.1:9001" || a != "-" {
		t.Errorf("the deregister's record says %q -> %q", b, a)
	}
	checkSameRevision(t, cli, p, recs)

	// Without a service: every service's, newest first, no sequence key.
	if err := etcd.SetCanary(ctx, cli, "other", registry.Canary{Color: "green", Percent: 1}, lib...); err != nil {
		t.Fatal(err)
	}
	all, err := etcd.History(ctx, cli, "", 0, etcd.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(want)+1 || all[0].Service != "other" || all[1].Revision != recs[0].Revision {
		t.Fatalf("History of every service: %d records, first %+v", len(all), all[0])
	}
	if two, err := etcd.History(ctx, cli, "svc", 2, etcd.WithPrefix(p)); err != nil || len(two) != 2 || two[1].Seq != recs[1].Seq {
		t.Fatalf("History with limit 2: %+v, %v", two, err)
	}
}

// Writers racing on one service: a traced canary writer, a traced policy
// writer (another key, the same journal) and an untraced writer of the
// canary key (as etcdctl would). Every traced write is recorded once, the
// sequence counts them all, and each record's before is what its change
// replaced: a writer whose keys changed between its read and its commit
// read again and retried.
func TestJournalConcurrentWriters(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	// A write loses at most as many races as the others write: under
	// maxWriteAttempts (32).
	const p, canaries, policies, direct = "/p", 15, 12, 12
	ctx := ctxFor(t, 60*time.Second)
	opts := []etcd.WriteOption{etcd.WithPrefix(p)}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	writer := func(n int, write func(cli *clientv3.Client, i int) error) {
		wcli := c.Client(t) // a connection each, so that the writes interleave
		wg.Go(func() {
			for i := range n {
				if err := write(wcli, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	writer(canaries, func(cli *clientv3.Client, i int) error {
		return etcd.SetCanary(ctx, cli, "svc", registry.Canary{Color: "blue", Percent: float64(i)}, opts...)
	})
	writer(policies, func(cli *clientv3.Client, i int) error {
		return etcd.SetPolicy(ctx, cli, "svc", registry.Policy{MaxConcurrent: i + 1}, opts...)
	})
	writer(direct, func(cli *clientv3.Client, i int) error {
		_, err := cli.Put(ctx, registry.CanaryKey(p, "svc"), fmt.Sprintf(`{"v":1,"color":"green","percent":%d}`, i))
		return err
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recs, err := etcd.History(ctx, cli, "svc", 0, etcd.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != canaries+policies {
		t.Fatalf("%d records, want %d", len(recs), canaries+policies)
	}
	greenBefore := 0
	for i, rec := range recs {
		if want := uint64(len(recs) - 1 - i); rec.Seq != want {
			t.Fatalf("record %d has seq %d, want %d", i, rec.Seq, want)
		}
		if strings.Contains(string(rec.Before), "green") {
			greenBefore++
		}
	}
	if seq := valueAt(t, cli, registry.JournalSeqKey(p, "svc"), 0); string(seq) != fmt.Sprint(canaries+policies) {
		t.Fatalf("sequence key holds %q, want %d", seq, canaries+policies)
	}
	checkSameRevision(t, cli, p, recs)
	t.Logf("%d traced writes; %d canary records replaced an untraced write", len(recs), greenBefore)
}

// 10,000 writes leave at most the journal's size of records per service,
// the newest; a smaller size given later removes the slots the larger one
// left. The writes go to 16 services at once (625 each, every ring wrapped
// around 89 times): one service's writes are sequential by design (each
// commit changes what the next one compares). Under -race, which makes each
// etcd request several times slower (10,000 writes took 23 s to over 90 s
// on a loaded 2-core machine, and 1,600 took 18 s), 800 (50 each, 7
// times around).
func TestJournalStaysBounded(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t, c.DirectEndpoints()...) // no proxy: its copying would dominate
	const p, size, services = "/p", 7, 16
	writes := 10000
	if raceEnabled {
		writes = 800
	}
	// 10,000 writes took 3.7 to 7.7 s plain: ten times that.
	ctx := ctxFor(t, 60*time.Second)
	opts := []etcd.WriteOption{etcd.WithPrefix(p), etcd.WithJournalSize(size)}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, services)
	for s := range services {
		wg.Go(func() {
			svc := fmt.Sprintf("svc%d", s)
			for i := range writes / services {
				if err := etcd.SetCanary(ctx, cli, svc, registry.Canary{Color: "blue", Percent: float64(i % 100)}, opts...); err != nil {
					errs <- fmt.Errorf("%s, write %d: %w", svc, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)
	for s := range services {
		svc := fmt.Sprintf("svc%d", s)
		if keys, _ := rawKeys(t, cli, registry.JournalKey(p, svc)); len(keys) > size {
			t.Fatalf("%s: %d record keys after %d writes, want at most %d", svc, len(keys), writes/services, size)
		}
		recs, err := etcd.History(ctx, cli, svc, 0, etcd.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		if last := uint64(writes/services - 1); len(recs) != size || recs[0].Seq != last || recs[size-1].Seq != last-size+1 {
			t.Fatalf("%s: %d records, seq %d..%d; want the newest %d", svc, len(recs), recs[len(recs)-1].Seq, recs[0].Seq, size)
		}
	}
	if keys, _ := rawKeys(t, cli, registry.JournalRoot(p)); len(keys) != services*(size+1) {
		t.Fatalf("%d journal keys in all, want %d (a ring and a sequence per service)", len(keys), services*(size+1))
	}
	t.Logf("%d traced writes in %v (%.0f/s)", writes, took, float64(writes)/took.Seconds())

	if err := etcd.ClearCanary(ctx, cli, "svc0", etcd.WithPrefix(p), etcd.WithJournalSize(3)); err != nil {
		t.Fatal(err)
	}
	if keys, _ := rawKeys(t, cli, registry.JournalKey(p, "svc0")); len(keys) > 3 {
		t.Fatalf("%d record keys after a write with size 3: %v", len(keys), keys)
	}
}

func TestJournalOptionsRejected(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 10*time.Second)
	for _, tc := range []struct {
		opt  etcd.WriteOption
		name string
	}{
		{etcd.WithJournalSize(0), "WithJournalSize(0)"},
		{etcd.WithJournalSize(registry.MaxJournal + 1), "WithJournalSize(10001)"},
		{etcd.WithBy(""), `WithBy("")`},
		{etcd.WithBy("bad\x00name"), "WithBy("},
		{etcd.WithSource("Bad Source"), `WithSource("Bad Source")`},
	} {
		err := etcd.SetCanary(ctx, cli, "svc", registry.Canary{Color: "blue", Percent: 1}, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: error %v, want one naming it", tc.name, err)
		}
	}
	if keys, _ := rawKeys(t, cli, "/"); len(keys) != 0 {
		t.Fatalf("refused writes left keys %v", keys)
	}
	if _, err := etcd.History(ctx, cli, "svc", -1); err == nil {
		t.Fatal("History with a negative limit: no error")
	}
}
