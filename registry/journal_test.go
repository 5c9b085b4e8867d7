package registry_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

func TestRecordRoundTripAndDescribe(t *testing.T) {
	at := time.Date(2026, 12, 4, 2, 30, 0, 0, time.FixedZone("CET", 3600))
	r := registry.Record{Seq: 7, Time: at, Who: "alice", Source: registry.SourceConsole, Action: registry.ActionWeight,
		Service: "user", Instance: "u1", Before: json.RawMessage(`{"v":1,"weight":0}`), After: json.RawMessage(`{"v":1,"weight":40}`), Revision: 99}
	data, err := registry.MarshalRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"seq":7,"time":"2026-12-04T01:30:00Z","who":"alice","source":"console","action":"weight","service":"user","instance":"u1","before":{"v":1,"weight":0},"after":{"v":1,"weight":40}}`
	if string(data) != want {
		t.Fatalf("MarshalRecord = %s\nwant %s", data, want)
	}
	got, err := registry.UnmarshalRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Time.Equal(at) || got.Revision != 0 || got.Who != "alice" || got.Seq != 7 {
		t.Fatalf("UnmarshalRecord = %+v", got)
	}
	if b, a := got.Describe(); b != "weight 0" || a != "weight 40" {
		t.Errorf("Describe = %q, %q", b, a)
	}
	// None stored as null, shown as "-"; settings in their own words.
	for _, tc := range []struct {
		action        string
		before, after string
		want          [2]string
	}{
		{registry.ActionDrain, "", `{"v":1,"weight":0}`, [2]string{"-", "weight 0"}},
		{registry.ActionCanary, `{"v":1,"color":"blue","percent":5}`, `{"v":1,"color":"blue","percent":0.5}`, [2]string{"blue 5%", "blue 0.5%"}},
		{registry.ActionPolicyClear, `{"v":1,"timeout":"800ms","maxConcurrent":5}`, "", [2]string{"timeout 800ms, maxConcurrent 5", "-"}},
		{registry.ActionDeregister, `{"v":1,"id":"u1","name":"user","addr":"10.0.0.1:9000"}`, "", [2]string{"10.0.0.1:9000", "-"}},
		{registry.ActionCanary, `"not a canary"`, "", [2]string{`"not a canary"`, "-"}},
	} {
		r := registry.Record{Who: "bob", Source: registry.SourceLibrary, Action: tc.action, Service: "user",
			Before: json.RawMessage(tc.before), After: json.RawMessage(tc.after)}
		data, err := registry.MarshalRecord(r)
		if err != nil {
			t.Fatalf("%s: %v", tc.action, err)
		}
		got, err := registry.UnmarshalRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		if b, a := got.Describe(); b != tc.want[0] || a != tc.want[1] {
			t.Errorf("%s %s -> %s: Describe = %q, %q; want %q", tc.action, tc.before, tc.after, b, a, tc.want)
		}
	}
}

func TestRecordRejected(t *testing.T) {
	ok := registry.Record{Who: "bob", Source: "command", Action: "drain", Service: "user"}
	for _, tc := range []struct {
		field string
		edit  func(*registry.Record)
	}{
		{"who", func(r *registry.Record) { r.Who = "" }},
		{"who", func(r *registry.Record) { r.Who = strings.Repeat("x", registry.MaxSetByLen+1) }},
		{"who", func(r *registry.Record) { r.Who = "bob\n" }},
		{"source", func(r *registry.Record) { r.Source = "Command" }},
		{"action", func(r *registry.Record) { r.Action = "" }},
		{"before/after", func(r *registry.Record) { r.After = json.RawMessage("{") }},
	} {
		r := ok
		tc.edit(&r)
		_, err := registry.MarshalRecord(r)
		var fe *registry.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("record %+v: error %v, want a FieldError for %s", r, err, tc.field)
		}
	}
	if _, err := registry.UnmarshalRecord([]byte(`{"v":2}`)); !errors.Is(err, registry.ErrUnsupportedVersion) {
		t.Errorf("v2 record: %v", err)
	}
	if _, err := registry.UnmarshalRecord([]byte(`{`)); !errors.Is(err, registry.ErrMalformedValue) {
		t.Errorf("bad record: %v", err)
	}
	if _, err := registry.ParseJournalSeq([]byte("x")); !errors.Is(err, registry.ErrMalformedValue) {
		t.Errorf("bad sequence: %v", err)
	}
	if got := registry.JournalSlotKey("/muster/services/", "user", 42); got != "/muster/services.history/user/00042" {
		t.Errorf("JournalSlotKey = %q", got)
	}
	if got := registry.JournalSeqKey("/muster/services", "user"); got != "/muster/services.history/user" {
		t.Errorf("JournalSeqKey = %q", got)
	}
}
