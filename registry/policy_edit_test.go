package registry_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// stored is a policy as SetPolicy stores it: retries and ejection on, with
// their defaults written in.
func stored() registry.Policy {
	return registry.Policy{Timeout: 800 * time.Millisecond, MaxConcurrent: 100, AffinityHeader: "x-user",
		Retry:   registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}},
		Outlier: registry.OutlierPolicy{FailurePercent: 40}}.Normalize()
}

// An edit merges its assignments into the policy: the fields it does not
// name keep their value, FIELD= resets one, and turning retries or
// ejection off resets their other fields unless the edit sets them.
func TestPolicyEditApply(t *testing.T) {
	with := func(edit func(*registry.Policy)) registry.Policy {
		p := stored()
		edit(&p)
		return p.Normalize()
	}
	for _, tc := range []struct {
		name string
		from registry.Policy
		set  []string
		want registry.Policy
	}{
		{"onto none", registry.Policy{}, []string{"timeout=1s", "retry.maxAttempts=3", "retry.codes=unavailable, Aborted"},
			registry.Policy{Timeout: time.Second, Retry: registry.RetryPolicy{MaxAttempts: 3, Codes: []string{"UNAVAILABLE", "ABORTED"}}}.Normalize()},
		{"merge keeps the others", stored(), []string{"maxConcurrent=7"}, with(func(p *registry.Policy) { p.MaxConcurrent = 7 })},
		{"FIELD= resets", stored(), []string{"timeout=", "affinityHeader="},
			with(func(p *registry.Policy) { p.Timeout, p.AffinityHeader = 0, "" })},
		{"0 resets a number", stored(), []string{"maxConcurrent=0"}, with(func(p *registry.Policy) { p.MaxConcurrent = 0 })},
		{"retries off resets the retry fields", stored(), []string{"retry.maxAttempts=1"},
			with(func(p *registry.Policy) { p.Retry = registry.RetryPolicy{} })},
		{"retries off by reset", stored(), []string{"retry.maxAttempts="},
			with(func(p *registry.Policy) { p.Retry = registry.RetryPolicy{} })},
		{"ejection off resets the outlier fields", stored(), []string{"outlier.failurePercent=0"},
			with(func(p *registry.Policy) { p.Outlier = registry.OutlierPolicy{} })},
		{"a retry field kept with retries", stored(), []string{"retry.backoffMax=2s"},
			with(func(p *registry.Policy) { p.Retry.BackoffMax = 2 * time.Second })},
		{"everything reset is the zero policy", registry.Policy{MaxConcurrent: 5}, []string{"maxConcurrent="}, registry.Policy{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := registry.ParsePolicyEdit(tc.set)
			if err != nil {
				t.Fatalf("ParsePolicyEdit(%q): %v", tc.set, err)
			}
			from := tc.from
			got, err := e.Apply(from)
			if err != nil {
				t.Fatalf("Apply(%q): %v", tc.set, err)
			}
			if !got.Equal(tc.want) || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Apply(%q) = %+v, want %+v", tc.set, got, tc.want)
			}
			if !reflect.DeepEqual(from, tc.from) {
				t.Errorf("Apply changed the policy it was given: %+v", from)
			}
		})
	}
	// Turning retries off while setting a retry field is refused: the
	// field would mean nothing.
	e, _ := registry.ParsePolicyEdit([]string{"retry.maxAttempts=0", "retry.backoffBase=1s"})
	if _, err := e.Apply(stored()); !isField(err, "retry.maxAttempts") {
		t.Errorf("retries off with a backoff: %v, want a *FieldError for retry.maxAttempts", err)
	}
}

func isField(err error, field string) bool {
	var fe *registry.FieldError
	return errors.As(err, &fe) && fe.Field == field && errors.Is(err, registry.ErrInvalidInstance)
}

// Each field's bad values are refused, by ParsePolicyEdit when they do not
// parse and by Apply when they are out of range, with the field and its
// range named; the assignments' syntax errors name the assignment.
func TestPolicyEditErrors(t *testing.T) {
	for _, tc := range []struct {
		set   []string
		field string   // the field named
		msg   []string // in the error
		parse bool     // refused by ParsePolicyEdit, not Apply
	}{
		{[]string{"timeout=soon"}, "timeout", []string{`timeout: "soon" is not a duration`, "want 1ms..1h"}, true},
		{[]string{"timeout=2h"}, "timeout", []string{"timeout", "1ms..1h"}, false},
		{[]string{"timeout=-1s"}, "timeout", []string{"1ms..1h"}, false},
		{[]string{"retry.maxAttempts=two"}, "retry.maxAttempts", []string{"not a whole number", "want 0..5"}, true},
		{[]string{"retry.maxAttempts=6"}, "retry.maxAttempts", []string{"0..5"}, false},
		{[]string{"retry.codes=OK"}, "retry.codes", []string{`"OK"`, "UNAVAILABLE"}, false},
		{[]string{"retry.codes="}, "retry.codes", []string{"at least one"}, false},
		{[]string{"retry.backoffBase=1"}, "retry.backoffBase", []string{"not a duration", "want 1ms..1m"}, true},
		{[]string{"retry.backoffBase=61s"}, "retry.backoffBase", []string{"1ms..1m0s"}, false},
		{[]string{"retry.backoffMax=x"}, "retry.backoffMax", []string{"not a duration", "retry.backoffBase..5m"}, true},
		{[]string{"retry.backoffMax=10ms"}, "retry.backoffMax", []string{"100ms..5m0s"}, false},
		{[]string{"outlier.failurePercent=half"}, "outlier.failurePercent", []string{"not a whole number", "0..100"}, true},
		{[]string{"outlier.failurePercent=101"}, "outlier.failurePercent", []string{"0..100"}, false},
		{[]string{"outlier.minRequests=x"}, "outlier.minRequests", []string{"not a whole number", "1..1000000"}, true},
		{[]string{"outlier.minRequests=-1"}, "outlier.minRequests", []string{"1..1000000"}, false},
		{[]string{"outlier.baseEjection=x"}, "outlier.baseEjection", []string{"not a duration", "1s..1h"}, true},
		{[]string{"outlier.baseEjection=100ms"}, "outlier.baseEjection", []string{"1s..1h0m0s"}, false},
		{[]string{"outlier.maxEjectedPercent=x"}, "outlier.maxEjectedPercent", []string{"not a whole number", "1..100"}, true},
		{[]string{"outlier.maxEjectedPercent=101"}, "outlier.maxEjectedPercent", []string{"1..100"}, false},
		{[]string{"maxConcurrent=1e3"}, "maxConcurrent", []string{"not a whole number", "0..1000000"}, true},
		{[]string{"maxConcurrent=-1"}, "maxConcurrent", []string{"0..1000000"}, false},
		{[]string{"affinityHeader=X-User"}, "affinityHeader", []string{"lower case"}, false},
		{[]string{"affinityHeader=grpc-key"}, "affinityHeader", []string{"grpc-"}, false},
		{[]string{"timeout=1s", "timeout=2s"}, "timeout", []string{"timeout is given twice"}, true},
		{[]string{"timeout"}, "", []string{`"timeout": want FIELD=VALUE`}, true},
		{[]string{"bogus=1"}, "", []string{`unknown field "bogus"; want one of timeout, retry.maxAttempts`, "affinityHeader"}, true},
		{[]string{"Timeout=1s"}, "", []string{`unknown field "Timeout"; did you mean timeout?`}, true},
		{nil, "", []string{"no FIELD=VALUE"}, true},
	} {
		t.Run(strings.Join(tc.set, " "), func(t *testing.T) {
			e, err := registry.ParsePolicyEdit(tc.set)
			if !tc.parse {
				if err != nil {
					t.Fatalf("ParsePolicyEdit: %v; want it refused by Apply", err)
				}
				_, err = e.Apply(stored())
				if !isField(err, tc.field) {
					t.Fatalf("Apply: %v, want a *FieldError for %s", err, tc.field)
				}
			} else {
				var pe *registry.PolicyEditError
				if !errors.As(err, &pe) || pe.Field != tc.field || !errors.Is(err, registry.ErrInvalidInstance) {
					t.Fatalf("ParsePolicyEdit: %v, want a *PolicyEditError for field %q", err, tc.field)
				}
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
		})
	}
}

// Every field has a name, a range, what it means and its default; each
// shows the value it was set to as an assignment takes it again.
func TestPolicyFields(t *testing.T) {
	values := map[string]string{
		"timeout": "800ms", "retry.maxAttempts": "3", "retry.codes": "UNAVAILABLE,ABORTED", "retry.backoffBase": "200ms",
		"retry.backoffMax": "2s", "outlier.failurePercent": "30", "outlier.minRequests": "20", "outlier.baseEjection": "1m0s",
		"outlier.maxEjectedPercent": "25", "maxConcurrent": "9", "affinityHeader": "x-user",
	}
	var set []string
	for _, f := range registry.PolicyFields() {
		if f.Range == "" || f.About == "" || f.Default == "" {
			t.Errorf("field %s lacks its range, meaning or default: %+v", f.Name, f)
		}
		v, ok := values[f.Name]
		if !ok {
			t.Fatalf("field %s has no value in this test", f.Name)
		}
		set = append(set, f.Name+"="+v)
	}
	e, err := registry.ParsePolicyEdit(set)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Apply(registry.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range registry.PolicyFields() {
		if got := f.Value(p); got != values[f.Name] {
			t.Errorf("%s shows %q, want %q", f.Name, got, values[f.Name])
		}
	}
	if got := strings.Join(p.Describe(), ", "); !strings.HasPrefix(got, "timeout 800ms, retry.maxAttempts 3, ") ||
		!strings.HasSuffix(got, "maxConcurrent 9, affinityHeader x-user") {
		t.Errorf("Describe = %q", got)
	}
}

// Who set a policy and when are stored with it, ignored by clients (a bad
// one does not lose the policy), and refused when unprintable or too long.
func TestPolicyInfoCodec(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 20, 0, 0, time.UTC)
	info := registry.PolicyInfo{Policy: registry.Policy{Timeout: 800 * time.Millisecond}, SetBy: "alice (console)", SetAt: at}
	js, err := registry.MarshalPolicyInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,"timeout":"800ms","setBy":"alice (console)","setAt":"2026-12-03T10:20:00Z"}`; string(js) != want {
		t.Fatalf("MarshalPolicyInfo = %s, want %s", js, want)
	}
	back, err := registry.UnmarshalPolicyInfo(js)
	if err != nil || !reflect.DeepEqual(back, info) {
		t.Fatalf("UnmarshalPolicyInfo(%s) = %+v, %v; want %+v", js, back, err, info)
	}
	if p, err := registry.UnmarshalPolicy(js); err != nil || !reflect.DeepEqual(p, registry.Policy{Timeout: 800 * time.Millisecond}) {
		t.Fatalf("UnmarshalPolicy(%s) = %+v, %v", js, p, err)
	}
	if js, _ := registry.MarshalPolicy(info.Policy); strings.Contains(string(js), "set") {
		t.Errorf("MarshalPolicy records who: %s", js)
	}
	// A client reads the policy whatever the rest says, and so does a
	// view, without a setter or time that does not decode.
	for _, v := range []string{
		`{"v":1,"timeout":"800ms","setBy":"a\u0000b","setAt":"yesterday","later":{"x":1}}`,
		`{"v":1,"timeout":"800ms","setBy":"` + strings.Repeat("a", registry.MaxSetByLen+1) + `","setAt":3}`,
	} {
		if p, err := registry.UnmarshalPolicy([]byte(v)); err != nil || p.Timeout != 800*time.Millisecond {
			t.Errorf("UnmarshalPolicy(%s) = %+v, %v; want the policy", v, p, err)
		}
	}
	v := `{"v":1,"timeout":"800ms","setBy":"a\u0000b","setAt":"yesterday"}`
	if info, err := registry.UnmarshalPolicyInfo([]byte(v)); err != nil || info.Policy.Timeout != 800*time.Millisecond ||
		info.SetBy != "" || !info.SetAt.IsZero() {
		t.Errorf("UnmarshalPolicyInfo(%s) = %+v, %v; want the policy, no setter, no time", v, info, err)
	}
	for _, by := range []string{"a\nb", strings.Repeat("é", registry.MaxSetByLen/2+1), "\xff"} {
		if _, err := registry.MarshalPolicyInfo(registry.PolicyInfo{Policy: info.Policy, SetBy: by}); !isField(err, "setBy") {
			t.Errorf("SetBy %q: %v, want a *FieldError for setBy", by, err)
		}
	}
}

// Equal compares policies once normalized.
func TestPolicyEqual(t *testing.T) {
	a := registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"unavailable"}}}
	if !a.Equal(a.Normalize()) || a.Equal(retrying(3)) || !(registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 1}}).Equal(registry.Policy{}) {
		t.Error("Equal does not compare normalized policies")
	}
	b := a
	b.Retry.Codes = []string{"UNAVAILABLE", "ABORTED"}
	if a.Equal(b) {
		t.Error("policies of other codes are Equal")
	}
}
