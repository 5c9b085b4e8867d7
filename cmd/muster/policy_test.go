package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// storedPolicy reads the policy of service as clients would, failing the
// test on an error.
func storedPolicy(t *testing.T, cli *clientv3.Client, service string) (registry.Policy, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	p, ok, err := etcd.GetPolicy(ctx, cli, service)
	if err != nil {
		t.Fatalf("GetPolicy %s: %v", service, err)
	}
	return p, ok
}

// rawPolicy returns the stored value of service's policy and its
// modification revision (0: none).
func rawPolicy(t *testing.T, cli *clientv3.Client, service string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, registry.PolicyKey(registry.DefaultPrefix, service))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// Set, show, merge, reset and clear, each checked in the registry.
func TestPolicyCommand(t *testing.T) {
	s := startServe(t, t.TempDir())
	cli := newClient(t, s.endpoint)
	ep := []string{"--endpoints", s.endpoint}
	policy := func(args ...string) result {
		t.Helper()
		return runOK(t, append(append([]string{"policy", "user"}, args...), ep...)...)
	}

	for _, args := range [][]string{nil, {"show"}} {
		if got := policy(args...); got.stdout != "user: no policy\n" {
			t.Fatalf("policy user %v with none set:\n%s", args, got.stdout)
		}
	}
	if got := policy("-o", "json"); got.stdout != "null\n" {
		t.Fatalf("policy user -o json with none set: %q, want null", got.stdout)
	}

	// Set prints the policy as stored, with the defaults of what it uses.
	got := policy("set", "timeout=800ms", "retry.maxAttempts=2", "retry.codes=unavailable, Resource_Exhausted")
	want := "timeout 800ms\nretry.maxAttempts 2\nretry.codes UNAVAILABLE,RESOURCE_EXHAUSTED\nretry.backoffBase 100ms\nretry.backoffMax 1s\n"
	if got.stdout != want {
		t.Fatalf("policy user set:\n%s\nwant:\n%s", got.stdout, want)
	}
	if got := policy(); got.stdout != want {
		t.Fatalf("policy user after set:\n%s\nwant:\n%s", got.stdout, want)
	}
	p, ok := storedPolicy(t, cli, "user")
	wantP := registry.Policy{Timeout: 800 * time.Millisecond, Retry: registry.RetryPolicy{MaxAttempts: 2,
		Codes: []string{"UNAVAILABLE", "RESOURCE_EXHAUSTED"}, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second}}
	if !ok || !reflect.DeepEqual(p, wantP) {
		t.Fatalf("stored policy %+v (%v), want %+v", p, ok, wantP)
	}
	if _, rev := rawPolicy(t, cli, "other"); rev != 0 {
		t.Fatal("setting user's policy wrote another service's")
	}

	// Set merges: the fields not named keep their value.
	policy("set", "maxConcurrent=100", "outlier.failurePercent=40", "affinityHeader=x-user")
	wantP.MaxConcurrent, wantP.AffinityHeader = 100, "x-user"
	wantP.Outlier = registry.OutlierPolicy{FailurePercent: 40, MinRequests: 10, BaseEjection: 30 * time.Second, MaxEjectedPercent: 50}
	if p, _ := storedPolicy(t, cli, "user"); !reflect.DeepEqual(p, wantP) {
		t.Fatalf("stored policy after a merge %+v, want %+v", p, wantP)
	}
	got = policy()
	for _, line := range []string{"timeout 800ms", "retry.maxAttempts 2", "outlier.failurePercent 40", "outlier.minRequests 10",
		"outlier.baseEjection 30s", "outlier.maxEjectedPercent 50", "maxConcurrent 100", "affinityHeader x-user"} {
		if !strings.Contains(got.stdout, line+"\n") {
			t.Errorf("policy user does not show %q:\n%s", line, got.stdout)
		}
	}

	// JSON is the stored value.
	raw, _ := rawPolicy(t, cli, "user")
	var fromJSON, fromKey any
	if err := json.Unmarshal([]byte(policy("show", "-o", "json").stdout), &fromJSON); err != nil {
		t.Fatalf("policy user -o json is not JSON: %v", err)
	}
	_ = json.Unmarshal([]byte(raw), &fromKey)
	if !reflect.DeepEqual(fromJSON, fromKey) {
		t.Fatalf("policy user -o json = %v, want the stored value %s", fromJSON, raw)
	}

	// FIELD= resets one field; turning retries off resets the retry
	// fields; a value of 0 is a reset too.
	policy("set", "timeout=", "retry.maxAttempts=")
	wantP.Timeout, wantP.Retry = 0, registry.RetryPolicy{}
	if p, _ := storedPolicy(t, cli, "user"); !reflect.DeepEqual(p, wantP) {
		t.Fatalf("stored policy after resets %+v, want %+v", p, wantP)
	}
	policy("set", "outlier.failurePercent=0", "affinityHeader=")
	wantP.Outlier, wantP.AffinityHeader = registry.OutlierPolicy{}, ""
	if p, _ := storedPolicy(t, cli, "user"); !reflect.DeepEqual(p, wantP) {
		t.Fatalf("stored policy after resets %+v, want %+v", p, wantP)
	}
	if got := policy(); got.stdout != "maxConcurrent 100\n" {
		t.Fatalf("policy user after resets:\n%s", got.stdout)
	}
	// A retry field set with the retries kept: the others stay.
	policy("set", "retry.maxAttempts=3", "retry.codes=aborted")
	policy("set", "retry.backoffMax=2s")
	if p, _ := storedPolicy(t, cli, "user"); p.Retry.MaxAttempts != 3 || p.Retry.BackoffMax != 2*time.Second || p.Retry.BackoffBase != 100*time.Millisecond {
		t.Fatalf("stored retries %+v, want 3 attempts, base 100ms, max 2s", p.Retry)
	}

	// A policy reset to nothing is removed.
	policy("set", "maxConcurrent=", "retry.maxAttempts=1")
	if _, rev := rawPolicy(t, cli, "user"); rev != 0 {
		t.Fatal("a policy reset to nothing is still stored")
	}
	if got := policy(); got.stdout != "user: no policy\n" {
		t.Fatalf("policy user after every field was reset:\n%s", got.stdout)
	}

	// Clear removes it.
	policy("set", "timeout=1s")
	if got := policy("clear"); got.stdout != "user: policy cleared\n" {
		t.Fatalf("policy user clear:\n%s", got.stdout)
	}
	if _, ok := storedPolicy(t, cli, "user"); ok {
		t.Fatal("a policy is stored after clear")
	}
	if got := policy("clear", "-o", "json"); got.stdout != "null\n" {
		t.Fatalf("policy user clear -o json: %q, want null", got.stdout)
	}
}

// Each bad field is refused with exit code 2, a message naming it and its
// range, and nothing written.
func TestPolicyUsageErrors(t *testing.T) {
	s := startServe(t, t.TempDir())
	cli := newClient(t, s.endpoint)
	ep := []string{"--endpoints", s.endpoint}
	runOK(t, append([]string{"policy", "user", "set", "timeout=800ms", "retry.maxAttempts=2", "retry.codes=UNAVAILABLE"}, ep...)...)
	before, rev := rawPolicy(t, cli, "user")

	for _, tc := range []struct {
		args []string // after "policy"
		msg  []string // in the error line
	}{
		{[]string{"user", "set", "timeout=2h"}, []string{"timeout", "1ms..1h"}},
		{[]string{"user", "set", "timeout=-1s"}, []string{"timeout", "1ms..1h"}},
		{[]string{"user", "set", "timeout=soon"}, []string{"timeout", "not a duration", "1ms..1h"}},
		{[]string{"user", "set", "retry.maxAttempts=9"}, []string{"retry.maxAttempts", "0..5"}},
		{[]string{"user", "set", "retry.maxAttempts=two"}, []string{"retry.maxAttempts", "not a whole number", "0..5"}},
		{[]string{"user", "set", "retry.codes=OK"}, []string{"retry.codes", "UNAVAILABLE"}},
		{[]string{"user", "set", "retry.codes=slow,unavailable"}, []string{"retry.codes", `"SLOW"`}},
		{[]string{"user", "set", "retry.codes="}, []string{"retry.codes", "at least one"}},
		{[]string{"user", "set", "retry.backoffBase=61s"}, []string{"retry.backoffBase", "1ms..1m0s"}},
		{[]string{"user", "set", "retry.backoffMax=10ms"}, []string{"retry.backoffMax", "100ms..5m0s"}},
		{[]string{"user", "set", "retry.backoffMax=10"}, []string{"retry.backoffMax", "not a duration"}},
		{[]string{"user", "set", "outlier.failurePercent=101"}, []string{"outlier.failurePercent", "0..100"}},
		{[]string{"user", "set", "outlier.minRequests=5"}, []string{"outlier.failurePercent", "1..100"}},
		{[]string{"user", "set", "outlier.failurePercent=10", "outlier.minRequests=-1"}, []string{"outlier.minRequests", "1..1000000"}},
		{[]string{"user", "set", "outlier.failurePercent=10", "outlier.baseEjection=100ms"}, []string{"outlier.baseEjection", "1s..1h0m0s"}},
		{[]string{"user", "set", "outlier.failurePercent=10", "outlier.maxEjectedPercent=101"}, []string{"outlier.maxEjectedPercent", "1..100"}},
		{[]string{"user", "set", "maxConcurrent=-1"}, []string{"maxConcurrent", "0..1000000"}},
		{[]string{"user", "set", "maxConcurrent=1e3"}, []string{"maxConcurrent", "not a whole number", "0..1000000"}},
		{[]string{"user", "set", "affinityHeader=X-User"}, []string{"affinityHeader", "lower case"}},
		{[]string{"user", "set", "affinityHeader=grpc-key"}, []string{"affinityHeader", "grpc-"}},
		// One bad pair among good ones: none is written.
		{[]string{"user", "set", "maxConcurrent=10", "timeout=2h"}, []string{"timeout", "1ms..1h"}},
		{[]string{"user", "set", "bogus=1"}, []string{`unknown field "bogus"`, "retry.maxAttempts", "affinityHeader"}},
		{[]string{"user", "set", "Timeout=1s"}, []string{`unknown field "Timeout"; did you mean timeout?`}},
		{[]string{"user", "set", "timeout"}, []string{`"timeout": want FIELD=VALUE`}},
		{[]string{"user", "set", "timeout=1s", "timeout=2s"}, []string{"timeout is given twice"}},
		{[]string{"user", "set"}, []string{"needs at least one FIELD=VALUE"}},
		{[]string{"user", "show", "timeout"}, []string{"takes no more arguments"}},
		{[]string{"user", "clear", "now"}, []string{"takes no more arguments"}},
		{[]string{"user", "delete"}, []string{`unknown verb "delete"; want show, set or clear`}},
		{[]string{"User"}, []string{"invalid service name"}},
		{[]string{}, []string{"needs a service name"}},
		{[]string{"user", "-o", "yaml"}, []string{`unknown format "yaml"`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(append(append([]string{"policy"}, tc.args...), ep...)...)
			if r.code != exitUsage {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, exitUsage, r.stdout, r.stderr)
			}
			first, rest, _ := strings.Cut(r.stderr, "\n")
			for _, m := range tc.msg {
				if !strings.HasPrefix(first, "muster: ") || !strings.Contains(first, m) {
					t.Errorf("first stderr line %q, want \"muster: ...%s...\"", first, m)
				}
			}
			if rest != "see 'muster policy --help'\n" {
				t.Errorf("after the error, stderr has %q", rest)
			}
			if r.stdout != "" {
				t.Errorf("stdout should be empty, got %q", r.stdout)
			}
			if after, arev := rawPolicy(t, cli, "user"); after != before || arev != rev {
				t.Fatalf("the stored policy changed: %s (revision %d), was %s (revision %d)", after, arev, before, rev)
			}
		})
	}
}

// A stored value that does not decode is reported, with how to remove it;
// set does not replace it; clear removes it.
func TestPolicyBadStoredValue(t *testing.T) {
	s := startServe(t, t.TempDir())
	cli := newClient(t, s.endpoint)
	ep := []string{"--endpoints", s.endpoint}
	putRaw(t, cli, registry.PolicyKey(registry.DefaultPrefix, "user"), `{"v":1,"maxConcurrent":-3}`)
	for _, args := range [][]string{{"policy", "user"}, {"policy", "user", "set", "timeout=1s"}} {
		r := run(append(args, ep...)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "maxConcurrent") || !strings.Contains(r.stderr, `"muster policy user clear" removes it`) {
			t.Errorf("muster %v on a bad value: exit %d, stderr %q; want 1, naming the field and clear", args, r.code, r.stderr)
		}
	}
	if raw, _ := rawPolicy(t, cli, "user"); raw != `{"v":1,"maxConcurrent":-3}` {
		t.Fatalf("the bad value was replaced by %s", raw)
	}
	runOK(t, append([]string{"policy", "user", "clear"}, ep...)...)
	if _, rev := rawPolicy(t, cli, "user"); rev != 0 {
		t.Fatal("clear left the bad value")
	}
}

// The help lists every field with its range and default and says where
// the clients' behaviour is documented.
func TestPolicyHelp(t *testing.T) {
	r := run("policy", "--help")
	if r.code != exitOK {
		t.Fatalf("policy --help: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"The policy is stored in the registry; clients apply it as the policy documentation (docs/POLICY.md) says.",
		"<prefix>.policy/<service>", "FIELD= (empty) resets", "exit code 2", "--output", "--endpoints",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("policy --help does not say %q:\n%s", want, r.stdout)
		}
	}
	// Each field on a line of its own, then what it takes and its
	// default, wrapped.
	flat := strings.Join(strings.Fields(r.stdout), " ")
	for _, want := range []string{
		"timeout 1ms..1h:", "retry.maxAttempts 0..5:", "retry.codes gRPC status code names but OK, comma-separated, case-insensitive:",
		"retry.backoffBase 1ms..1m:", "Default: 100ms when retrying", "retry.backoffMax retry.backoffBase..5m:", "Default: 1s",
		"outlier.failurePercent 0..100:", "outlier.minRequests 1..1000000:", "Default: 10 when ejecting",
		"outlier.baseEjection 1s..1h:", "Default: 30s when ejecting", "outlier.maxEjectedPercent 1..100:", "Default: 50 when ejecting",
		"maxConcurrent 0..1000000:", "Default: 0, no cap", "affinityHeader a header name", "Default: x-muster-key",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("policy --help does not say %q:\n%s", want, r.stdout)
		}
	}
	for _, f := range policyFields {
		if !strings.Contains(r.stdout, "\n  "+f.name+"\n      ") {
			t.Errorf("policy --help does not list %s on a line of its own", f.name)
		}
	}
}

// muster ls <service> says when the service has a call policy, with its
// fields, and says nothing of one when it has none.
func TestLsSaysAPolicyIsSet(t *testing.T) {
	s := startServe(t, t.TempDir())
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "user", Addr: "10.0.0.1:9000"})
	if out := runOK(t, "ls", "user", "--endpoints", s.endpoint).stdout; strings.Contains(out, "policy:") {
		t.Fatalf("ls of a service without a policy:\n%s", out)
	}
	runOK(t, "policy", "user", "set", "timeout=800ms", "maxConcurrent=50", "--endpoints", s.endpoint)
	out := runOK(t, "ls", "user", "--endpoints", s.endpoint).stdout
	if !strings.Contains(out, "policy: timeout 800ms, maxConcurrent 50 (muster policy user)") {
		t.Fatalf("ls of a service with a policy:\n%s", out)
	}
}

// set records who set the policy (the etcd user given by --user, without
// its password; else the local user) and when; show prints them after the
// fields, on stderr, JSON carries them, and ls says them on its policy line.
func TestPolicyRecordsWhoSetIt(t *testing.T) {
	s := newSecureRegistry(t)
	before := time.Now().UTC().Truncate(time.Second)
	runOK(t, s.args([]string{"policy", "user", "set", "timeout=800ms"}, "--user", "root:root-pw")...)
	after := time.Now().UTC()
	root := s.c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	info, ok, err := etcd.GetPolicyInfo(ctx, root, "user")
	if err != nil || !ok || info.SetBy != "root (command)" || info.SetAt.Before(before) || info.SetAt.After(after) {
		t.Fatalf("stored policy info %+v, %v, %v; want set by root (command) between %v and %v", info, ok, err, before, after)
	}
	if raw, _ := rawPolicy(t, root, "user"); strings.Contains(raw, "root-pw") {
		t.Fatalf("the stored policy holds the password: %s", raw)
	}
	r := runOK(t, s.args([]string{"policy", "user"}, "--user", "root:root-pw")...)
	wantBy := "set by root (command) at " + info.SetAt.Format(time.RFC3339)
	if r.stdout != "timeout 800ms\n" || r.stderr != wantBy+"\n" {
		t.Fatalf("policy user show: stdout %q, stderr %q; want the field, then %q on stderr", r.stdout, r.stderr, wantBy)
	}
	var js struct {
		Timeout string    `json:"timeout"`
		SetBy   string    `json:"setBy"`
		SetAt   time.Time `json:"setAt"`
	}
	r = runOK(t, s.args([]string{"policy", "user", "show", "-o", "json"}, "--user", "root:root-pw")...)
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js.Timeout != "800ms" || js.SetBy != "root (command)" || !js.SetAt.Equal(info.SetAt) {
		t.Fatalf("policy user -o json = %s (%v), want the setter and time", r.stdout, err)
	}
	r = runOK(t, s.args([]string{"ls", "user"}, "--user", "root:root-pw")...)
	if want := "policy: timeout 800ms (muster policy user), " + wantBy + "\n"; !strings.Contains(r.stdout, want) {
		t.Fatalf("ls user:\n%s\nwant the line %q", r.stdout, want)
	}

	// Without --user, the local user.
	plain := startServe(t, t.TempDir())
	runOK(t, "policy", "user", "set", "maxConcurrent=5", "--endpoints", plain.endpoint)
	got, _ := rawPolicy(t, newClient(t, plain.endpoint), "user")
	if want := `"setBy":` + strconv.Quote((&globalOptions{}).setter()); !strings.Contains(got, want) || !strings.HasSuffix((&globalOptions{}).setter(), " (command)") {
		t.Fatalf("stored policy %s, want %s", got, want)
	}
}
