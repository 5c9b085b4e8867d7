package registry_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// storedFormat is one kind of value Muster stores in etcd, with a golden
// key and value: what this release writes, and what a release that reads
// schema version 1 must go on reading (docs/UPGRADING.md).
type storedFormat struct {
	name        string
	key, golden string // the golden key and value
	gotKey      string // the key this code computes
	marshal     func() ([]byte, error)
	decode      func([]byte) (any, error)
	want        any
}

var goldenTime = time.Date(2026, 12, 4, 2, 30, 0, 5, time.UTC)

func storedFormats() []storedFormat {
	const prefix = registry.DefaultPrefix
	in := registry.Instance{ID: "user-1", Name: "user", Version: "1.4.2", Addr: "10.0.0.7:9000", Zone: "eu-1a",
		Region: "eu-1", Weight: 150, Metadata: map[string]string{"metrics": "10.0.0.7:9100", "color": "blue"}, RegisteredAt: goldenTime}
	zero, two := 0, 200
	canary := registry.Canary{Color: "blue", Percent: 5}
	policy := registry.PolicyInfo{Policy: registry.Policy{Timeout: 800 * time.Millisecond,
		Retry:         registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second},
		Outlier:       registry.OutlierPolicy{FailurePercent: 50, MinRequests: 10, BaseEjection: 30 * time.Second, MaxEjectedPercent: 50},
		MaxConcurrent: 100, AffinityHeader: "x-muster-key"}, SetBy: "alice (console)", SetAt: goldenTime}
	record := registry.Record{Seq: 7, Time: goldenTime, Who: "alice", Source: registry.SourceConsole, Action: registry.ActionDrain,
		Service: "user", Instance: "user-1", Before: []byte("null"), After: []byte(`{"v":1,"weight":0}`)}
	return []storedFormat{{
		name: "instance", key: "/muster/services/user/user-1", gotKey: registry.Key(prefix, "user", "user-1"),
		golden: `{"v":1,"id":"user-1","name":"user","version":"1.4.2","addr":"10.0.0.7:9000","zone":"eu-1a","region":"eu-1",` +
			`"weight":150,"metadata":{"color":"blue","metrics":"10.0.0.7:9100"},"registered_at":"2026-12-04T02:30:00.000000005Z"}`,
		marshal: func() ([]byte, error) { return registry.Marshal(in) },
		decode:  func(b []byte) (any, error) { return registry.Unmarshal(b) },
		want:    in,
	}, {
		name: "drained instance", key: "/muster/services/user/10.0.0.8:9000", gotKey: registry.Key(prefix, "user", "10.0.0.8:9000"),
		golden: `{"v":1,"id":"10.0.0.8:9000","name":"user","addr":"10.0.0.8:9000","weight":0}`,
		marshal: func() ([]byte, error) {
			return registry.Marshal(registry.Instance{Name: "user", Addr: "10.0.0.8:9000", Draining: true})
		},
		decode: func(b []byte) (any, error) { return registry.Unmarshal(b) },
		want:   registry.Instance{ID: "10.0.0.8:9000", Name: "user", Addr: "10.0.0.8:9000", Weight: 0, Draining: true},
	}, {
		name: "drain override", key: "/muster/services/user/user-1/override", gotKey: registry.OverrideKey(prefix, "user", "user-1"),
		golden:  `{"v":1,"weight":0}`,
		marshal: func() ([]byte, error) { return registry.MarshalOverride(registry.Override{Weight: &zero}) },
		decode:  func(b []byte) (any, error) { return registry.UnmarshalOverride(b) },
		want:    registry.Override{Weight: &zero},
	}, {
		name: "weight override", key: "/muster/services/user/user-1/override", gotKey: registry.OverrideKey(prefix, "user", "user-1"),
		golden:  `{"v":1,"weight":200}`,
		marshal: func() ([]byte, error) { return registry.MarshalOverride(registry.Override{Weight: &two}) },
		decode:  func(b []byte) (any, error) { return registry.UnmarshalOverride(b) },
		want:    registry.Override{Weight: &two},
	}, {
		name: "canary", key: "/muster/services.canary/user", gotKey: registry.CanaryKey(prefix, "user"),
		golden:  `{"v":1,"color":"blue","percent":5}`,
		marshal: func() ([]byte, error) { return registry.MarshalCanary(canary) },
		decode:  func(b []byte) (any, error) { return registry.UnmarshalCanary(b) },
		want:    canary,
	}, {
		name: "policy", key: "/muster/services.policy/user", gotKey: registry.PolicyKey(prefix, "user"),
		golden: `{"v":1,"timeout":"800ms","retry":{"maxAttempts":2,"codes":["UNAVAILABLE"],"backoffBase":"100ms","backoffMax":"1s"},` +
			`"outlier":{"failurePercent":50,"minRequests":10,"baseEjection":"30s","maxEjectedPercent":50},"maxConcurrent":100,` +
			`"affinityHeader":"x-muster-key","setBy":"alice (console)","setAt":"2026-12-04T02:30:00.000000005Z"}`,
		marshal: func() ([]byte, error) { return registry.MarshalPolicyInfo(policy) },
		decode:  func(b []byte) (any, error) { return registry.UnmarshalPolicyInfo(b) },
		want:    policy,
	}, {
		name: "journal record", key: "/muster/services.history/user/00007", gotKey: registry.JournalSlotKey(prefix, "user", 7),
		golden: `{"v":1,"seq":7,"time":"2026-12-04T02:30:00.000000005Z","who":"alice","source":"console","action":"drain",` +
			`"service":"user","instance":"user-1","before":null,"after":{"v":1,"weight":0}}`,
		marshal: func() ([]byte, error) { return registry.MarshalRecord(record) },
		decode:  func(b []byte) (any, error) { return registry.UnmarshalRecord(b) },
		want:    record,
	}, {
		name: "journal sequence", key: "/muster/services.history/user", gotKey: registry.JournalSeqKey(prefix, "user"),
		golden:  `8`,
		marshal: func() ([]byte, error) { return []byte("8"), nil }, // written by registry/etcd as a decimal
		decode:  func(b []byte) (any, error) { return registry.ParseJournalSeq(b) },
		want:    uint64(8),
	}}
}

// Each stored format's key and value are the golden ones: this code
// writes exactly them and reads them back as the golden object. A change
// that fails this test changes what other releases read and write:
// docs/UPGRADING.md says what such a change needs (a new schema version,
// readers upgraded first).
func TestStoredFormatsAreStable(t *testing.T) {
	for _, f := range storedFormats() {
		if f.gotKey != f.key {
			t.Errorf("%s: key %q, golden %q", f.name, f.gotKey, f.key)
		}
		b, err := f.marshal()
		if err != nil || string(b) != f.golden {
			t.Errorf("%s: written as %s (%v), golden\n%s", f.name, b, err, f.golden)
		}
		got, err := f.decode([]byte(f.golden))
		if err != nil || !reflect.DeepEqual(got, f.want) {
			t.Errorf("%s: golden value read as %+v (%v), want %+v", f.name, got, err, f.want)
		}
	}
}

// A field this release does not know, in any stored JSON value of schema
// version 1, is ignored: a later release may add one, and this one reads
// the value as before (a mixed fleet).
func TestStoredFormatsIgnoreUnknownFields(t *testing.T) {
	for _, f := range storedFormats() {
		if !strings.HasPrefix(f.golden, "{") {
			continue // not JSON: the journal's sequence
		}
		for _, later := range []string{`{"later":{"a":[1,"x"]},`, `{"later":"x",`} {
			value := later + f.golden[1:]
			got, err := f.decode([]byte(value))
			if err != nil || !reflect.DeepEqual(got, f.want) {
				t.Errorf("%s: %s read as %+v (%v), want %+v", f.name, value, got, err, f.want)
			}
		}
	}
}

// A value of another schema version is refused with
// ErrUnsupportedVersion, never read as version 1: a reader skips it
// (an instance) or takes it as no setting (a canary, a policy).
func TestStoredFormatsRefuseOtherVersions(t *testing.T) {
	for _, f := range storedFormats() {
		if !strings.HasPrefix(f.golden, `{"v":1,`) {
			continue
		}
		value := `{"v":2,` + strings.TrimPrefix(f.golden, `{"v":1,`)
		if _, err := f.decode([]byte(value)); !errors.Is(err, registry.ErrUnsupportedVersion) {
			t.Errorf("%s: %s read with %v, want ErrUnsupportedVersion", f.name, value, err)
		}
	}
}
