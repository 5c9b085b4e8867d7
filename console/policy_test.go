package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// policyInfo reads the policy of service from etcd, with who set it.
func (f *fixture) policyInfo(service string) (registry.PolicyInfo, bool) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	info, ok, err := etcd.GetPolicyInfo(ctx, f.cli, service)
	if err != nil {
		f.t.Fatalf("GetPolicyInfo %s: %v", service, err)
	}
	return info, ok
}

// An admin edits a service's policy by FIELD=VALUE assignments, merged into
// the stored one and recorded as set by the admin's user; a request
// without an admin session or its CSRF token is refused with 403, a bad
// value with 400 naming the field and its range, and neither writes.
func TestConsolePolicyEdit(t *testing.T) {
	f := newFixture(t, console.WithAdminUsers(htpasswd(t, "admin-user", "correct horse")))
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	set := func(assignments ...string) map[string]any {
		return map[string]any{"service": "payments", "set": assignments}
	}
	good := set("timeout=800ms", "retry.maxAttempts=2", "retry.codes=unavailable")

	viewer := newClient(t, f.url)
	if code, body := viewer.post("policy", good); code != http.StatusForbidden {
		t.Errorf("a policy edit without logging in: %d %s, want 403", code, body)
	}
	c := newClient(t, f.url)
	c.loginAs("admin-user", "correct horse")
	for _, tc := range forgedHeaders(c.csrf) {
		if code := c.postWith("policy", good, tc.header); code != http.StatusForbidden {
			t.Errorf("a policy edit with %s: %d, want 403", tc.what, code)
		}
	}
	if _, ok := f.policyInfo("payments"); ok {
		t.Fatal("a refused policy edit wrote a policy")
	}

	before := time.Now().UTC().Truncate(time.Second)
	code, body := c.post("policy", good)
	if code != http.StatusOK {
		t.Fatalf("the policy edit of an admin: %d %s", code, body)
	}
	info, ok := f.policyInfo("payments")
	want := registry.Policy{Timeout: 800 * time.Millisecond, Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}}}
	if !ok || !info.Policy.Equal(want) || info.SetBy != "admin-user (console)" || info.SetAt.Before(before) {
		t.Fatalf("stored policy %+v (%v), want %+v set by admin-user (console) since %v", info, ok, want, before)
	}
	var res struct {
		Policy map[string]any `json:"policy"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || res.Policy["setBy"] != "admin-user (console)" || res.Policy["timeout"] != "800ms" {
		t.Fatalf("answer %s (%v), want the stored policy", body, err)
	}
	if !strings.Contains(f.log.String(), `msg="console: policy" who="user \"admin-user\" (session `) {
		t.Errorf("the edit is not logged with the user's name:\n%s", f.log.String())
	}

	// Bad edits: refused with 400 naming the field, and nothing written.
	_, rev := rawValue(t, f, "payments")
	for _, tc := range []struct {
		body map[string]any
		msg  []string
	}{
		{set("timeout=2h"), []string{"invalid policy of payments", "timeout", "1ms..1h"}},
		{set("timeout=soon"), []string{`timeout: "soon" is not a duration`, "1ms..1h"}},
		{set("retry.maxAttempts=9"), []string{"retry.maxAttempts", "0..5"}},
		{set("outlier.failurePercent=10", "outlier.maxEjectedPercent=101"), []string{"outlier.maxEjectedPercent", "1..100"}},
		{set("maxConcurrent=-1"), []string{"maxConcurrent", "0..1000000"}},
		{set("affinityHeader=X-User"), []string{"affinityHeader", "lower case"}},
		{set("bogus=1"), []string{`unknown field "bogus"`}},
		{set("timeout"), []string{"want FIELD=VALUE"}},
		{set(), []string{"no FIELD=VALUE"}},
		{map[string]any{"service": "payments", "set": []string{"timeout=1s"}, "clear": true}, []string{"not both"}},
		{map[string]any{"service": "Payments", "set": []string{"timeout=1s"}}, []string{"name"}},
	} {
		code, body := c.post("policy", tc.body)
		if code != http.StatusBadRequest {
			t.Errorf("%v: %d %s, want 400", tc.body, code, body)
			continue
		}
		for _, m := range tc.msg {
			if !strings.Contains(body, m) {
				t.Errorf("%v: answer %q does not say %q", tc.body, body, m)
			}
		}
	}
	if _, after := rawValue(t, f, "payments"); after != rev {
		t.Fatalf("a refused edit wrote the policy (revision %d, was %d)", after, rev)
	}

	// A merge keeps the other fields; the page's stream carries the
	// policy, its fields and who set it.
	if code, body := c.post("policy", set("maxConcurrent=50", "timeout=")); code != http.StatusOK {
		t.Fatalf("merge: %d %s", code, body)
	}
	want.Timeout, want.MaxConcurrent = 0, 50
	if info, _ := f.policyInfo("payments"); !info.Policy.Equal(want) {
		t.Fatalf("stored policy after a merge %+v, want %+v", info.Policy, want)
	}
	ev := policyEvent(t, f, "payments", func(v serviceState) bool { return v.Policy != nil })
	if ev.Policy["setBy"] != "admin-user (console)" || ev.Policy["setAt"] == nil {
		t.Errorf("the stream's policy %v does not say who set it and when", ev.Policy)
	}
	wantFields := []fieldValue{{"retry.maxAttempts", "2"}, {"retry.codes", "UNAVAILABLE"}, {"retry.backoffBase", "100ms"},
		{"retry.backoffMax", "1s"}, {"maxConcurrent", "50"}}
	if !reflect.DeepEqual(ev.PolicyFields, wantFields) {
		t.Errorf("the stream's policy fields %v, want %v", ev.PolicyFields, wantFields)
	}

	// Clear, and an edit resetting every field, remove the policy.
	if code, body := c.post("policy", map[string]any{"service": "payments", "clear": true}); code != http.StatusOK || !strings.Contains(body, `"policy":null`) {
		t.Fatalf("clear: %d %s", code, body)
	}
	if _, ok := f.policyInfo("payments"); ok {
		t.Fatal("a policy is stored after clear")
	}
	c.post("policy", set("maxConcurrent=5"))
	if code, body := c.post("policy", set("maxConcurrent=")); code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, body)
	}
	if _, ok := f.policyInfo("payments"); ok {
		t.Fatal("a policy reset to nothing is still stored")
	}

	// A read-only console refuses every edit.
	ro := newFixture(t)
	if code, _ := newClient(t, ro.url).post("policy", good); code != http.StatusForbidden {
		t.Errorf("a policy edit on a read-only console: %d, want 403", code)
	}
}

// rawValue returns the stored value of service's policy and its
// modification revision (0: none).
func rawValue(t *testing.T, f *fixture, service string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := f.cli.Get(ctx, registry.PolicyKey(registry.DefaultPrefix, service))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// serviceState is the part of a service page's state these tests read.
type serviceState struct {
	Policy       map[string]any `json:"policy"`
	PolicyFields []fieldValue   `json:"policyFields"`
}

type fieldValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// policyEvent returns the first state of service's stream that ok accepts.
func policyEvent(t *testing.T, f *fixture, service string, ok func(serviceState) bool) serviceState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for ev := range ssetest.Open(ctx, t, f.url+"api/service/events?name="+service, nil) {
		if ev.Name != "state" {
			continue
		}
		var v serviceState
		if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
			t.Fatalf("state %s: %v", ev.Data, err)
		}
		if ok(v) {
			return v
		}
	}
	t.Fatalf("no state of %s as wanted within %v", service, waitTimeout)
	return serviceState{}
}

// The service page shows who set the policy, and an admin edits it there:
// the change shows without reload, with the command that does the same.
func TestConsoleServicePageEditsThePolicy(t *testing.T) {
	f, b := adminPage(t)
	b.Do(browsertest.Timeout, "no policy, and the editor",
		browsertest.WaitJS(`!document.querySelector('#no-policy').hidden && document.querySelector('#policy').hidden`),
		browsertest.WaitJS(`!document.querySelector('#policy-edit').hidden && document.querySelector('#policy-fields input[data-field="timeout"]') !== null`),
	)
	b.Do(browsertest.Timeout, "set a timeout and a cap in the editor",
		setField(`#policy-fields input[data-field="timeout"]`, "800ms", "input"),
		setField(`#policy-fields input[data-field="maxConcurrent"]`, "5", "input"),
		chromedp.Click(chromedp.CSS("#policy-save")),
		browsertest.WaitJS(`document.querySelector('#policy-result').dataset.done === 'yes'`),
		browsertest.WaitJS(`document.querySelector('#policy').textContent === 'Call policy: timeout 800ms, maxConcurrent 5 (muster policy payments)'`),
		browsertest.WaitJS(`document.querySelector('#policy-by').dataset.setBy === 'admin token (console)'`),
	)
	if got := b.Text("#policy-cmd"); got != "muster policy payments set timeout=800ms maxConcurrent=5" {
		t.Errorf("equivalent command = %q", got)
	}
	info, ok := f.policyInfo("payments")
	if !ok || info.SetBy != "admin token (console)" || !info.Policy.Equal(registry.Policy{Timeout: 800 * time.Millisecond, MaxConcurrent: 5}) {
		t.Fatalf("stored policy %+v (%v)", info, ok)
	}
	if got, want := b.Text("#policy-by"), "Set by admin token (console) at "+info.SetAt.Format(time.RFC3339); got != want {
		t.Errorf("setter line %q, want %q", got, want)
	}
	b.Screenshot("policy")

	// A bad value is refused with the field's range, and nothing changes.
	b.Do(browsertest.Timeout, "a timeout out of range",
		setField(`#policy-fields input[data-field="timeout"]`, "2h", "input"),
		chromedp.Click(chromedp.CSS("#policy-save")),
		browsertest.WaitJS(`document.querySelector('#policy-result').dataset.done === 'error'`),
	)
	if got := b.Text("#policy-result"); !strings.Contains(got, "timeout") || !strings.Contains(got, "1ms..1h") {
		t.Errorf("the refusal says %q, want the field and its range", got)
	}
	if again, _ := f.policyInfo("payments"); !reflect.DeepEqual(again, info) {
		t.Fatalf("a refused edit changed the policy to %+v", again)
	}

	// Set elsewhere (the command), the policy and its setter follow.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := etcd.SetPolicy(ctx, f.cli, "payments", registry.Policy{MaxConcurrent: 7}, etcd.WithBy("bob"), etcd.WithSource(registry.SourceCommand)); err != nil {
		t.Fatal(err)
	}
	b.Do(browsertest.Timeout, "the command's policy shows without reload",
		browsertest.WaitJS(`document.querySelector('#policy').textContent === 'Call policy: maxConcurrent 7 (muster policy payments)'`),
		browsertest.WaitJS(`document.querySelector('#policy-by').dataset.setBy === 'bob (command)'`),
	)
	b.Do(browsertest.Timeout, "clear it",
		chromedp.Click(chromedp.CSS("#policy-clear")),
		browsertest.WaitJS(`document.querySelector('#policy').hidden && !document.querySelector('#no-policy').hidden`),
	)
	if _, ok := f.policyInfo("payments"); ok {
		t.Fatal("a policy is stored after the page cleared it")
	}
}
