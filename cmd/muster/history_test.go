package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/osuser"
	"github.com/musterhq/muster/registry"
)

// A drain from the console and a weight from the command show in muster
// history: who (the console's user, the local user), from where, before
// and after, newest first, and the line saying what is not traced.
func TestHistoryShowsConsoleAndCommandWrites(t *testing.T) {
	s := startServe(t, t.TempDir())
	register(t, newRegistrar(t, s.endpoint), registry.Instance{Name: "user", ID: "u1", Addr: "10.0.0.1:9001"})
	ep := []string{"--endpoints", s.endpoint}

	// Nothing traced yet: said so, and the note.
	if got := runOK(t, append([]string{"history", "user"}, ep...)...); got.stdout != "no traced writes of user\n"+untracedNote+"\n" {
		t.Fatalf("history before any write:\n%s", got.stdout)
	}

	url := startConsole(t, s.endpoint, consoleOptions{listen: "127.0.0.1:0", consoleFlags: consoleFlags{usersFile: aliceUsersFile(t, t.TempDir())}})
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: waitTimeout}
	csrf := loginAlice(t, c, url)
	drain := map[string]any{"action": "drain", "service": "user", "ids": []string{"u1"}}
	if code, body := post(t, c, url+"api/action", csrf, drain); code != http.StatusOK || !strings.Contains(body, `"done":1`) {
		t.Fatalf("drain from the console: status %d, body %q", code, body)
	}
	runOK(t, append([]string{"weight", "user", "u1", "40"}, ep...)...)

	got := runOK(t, append([]string{"history", "user"}, ep...)...)
	lines := strings.Split(strings.TrimSuffix(got.stdout, "\n"), "\n")
	me := regexp.QuoteMeta(osuser.Name())
	want := []string{
		`^TIME +WHO +SOURCE +ACTION +INSTANCE +BEFORE +AFTER +REV$`,
		`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +` + me + ` +command +weight +u1 +weight 0 +weight 40 +\d+$`,
		`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +alice +console +drain +u1 +- +weight 0 +\d+$`,
		`^` + regexp.QuoteMeta(untracedNote) + `$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("history user:\n%s\nwant %d lines", got.stdout, len(want))
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("history user, line %d:\n%s\nwant /%s/", i, lines[i], re)
		}
	}

	// JSON: the records as stored, with their revision; the note on
	// stderr. Without a service: every service's, with a SERVICE column.
	got = runOK(t, append([]string{"history", "user", "-o", "json", "--limit", "1"}, ep...)...)
	var recs []registry.Record
	if err := json.Unmarshal([]byte(got.stdout), &recs); err != nil || len(recs) != 1 {
		t.Fatalf("history -o json --limit 1: %v\n%s", err, got.stdout)
	}
	if r := recs[0]; r.Source != registry.SourceCommand || r.Action != registry.ActionWeight || r.Revision == 0 ||
		!sameOverride(r.Before, 0) || !sameOverride(r.After, 40) {
		t.Errorf("the weight's record in JSON: %+v", r)
	}
	if got.stderr != untracedNote+"\n" {
		t.Errorf("history -o json: stderr %q, want the note", got.stderr)
	}
	got = runOK(t, append([]string{"history"}, ep...)...)
	if !strings.HasPrefix(got.stdout, "TIME  ") || !strings.Contains(got.stdout, "SERVICE") || strings.Count(got.stdout, " user ") != 2 {
		t.Errorf("history of every service:\n%s", got.stdout)
	}
	for _, args := range [][]string{{"history", "user", "--limit", "-1"}, {"history", "Bad Name"}, {"history", "a", "b"}} {
		if r := run(append(args, ep...)...); r.code != exitUsage {
			t.Errorf("muster %v: exit code %d, want %d; stderr %q", args, r.code, exitUsage, r.stderr)
		}
	}
}

// With --user the command's writes are recorded as made by that etcd
// user. A user who may change the instances but not write the journal
// changes nothing; one who may only read the journal reads it.
func TestHistoryRecordsTheEtcdUser(t *testing.T) {
	s := newSecureRegistry(t)
	root := s.c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// ops: read-write on every key of the registry (the prefix without
	// its slash also covers .canary, .policy and .history); auditor: read
	// on the journal only.
	for user, perm := range map[string][2]string{"ops": {registry.DefaultPrefix, "rw"}, "auditor": {registry.JournalRoot(registry.DefaultPrefix), "r"}} {
		kind := clientv3.PermissionType(clientv3.PermRead)
		if perm[1] == "rw" {
			kind = clientv3.PermissionType(clientv3.PermReadWrite)
		}
		for _, step := range []func() error{
			func() error { _, err := root.RoleAdd(ctx, user); return err },
			func() error {
				_, err := root.RoleGrantPermission(ctx, user, perm[0], clientv3.GetPrefixRangeEnd(perm[0]), kind)
				return err
			},
			func() error { _, err := root.UserAdd(ctx, user, user+"-pw"); return err },
			func() error { _, err := root.UserGrantRole(ctx, user, user); return err },
		} {
			if err := step(); err != nil {
				t.Fatalf("set up %s: %v", user, err)
			}
		}
	}
	runOK(t, s.args([]string{"drain", "user", "user-1"}, "--user", "ops:ops-pw")...)
	// user-svc may write the service's instances, not its journal.
	// The refusal names the journal, which the user may not read, not only
	// the instance's override, which it may.
	if r := run(s.args([]string{"weight", "user", "user-1", "5"}, "--user", "user-svc:user-pw")...); r.code != exitFailure ||
		!strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, registry.JournalSeqKey(registry.DefaultPrefix, "user")) {
		t.Fatalf("weight as user-svc: exit code %d, stderr %q; want 1 and a permission error naming the journal", r.code, r.stderr)
	}
	got := runOK(t, s.args([]string{"history", "user"}, "--user", "auditor:auditor-pw")...)
	lines := strings.Split(strings.TrimSuffix(got.stdout, "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^\S+ +ops +command +drain +user-1 +- +weight 0 +\d+$`).MatchString(lines[1]) {
		t.Fatalf("history as auditor after a drain as ops and a refused weight:\n%s", got.stdout)
	}
	resp, err := root.Get(ctx, registry.OverrideKey(registry.DefaultPrefix, "user", "user-1"))
	if err != nil || len(resp.Kvs) != 1 || !sameOverride(resp.Kvs[0].Value, 0) {
		t.Fatalf("override after the refused weight: %v, %v; want the drain's", resp, err)
	}
}

// sameOverride reports whether v is an override of weight w.
func sameOverride(v json.RawMessage, w int) bool {
	o, err := registry.UnmarshalOverride(v)
	return err == nil && o.Weight != nil && *o.Weight == w
}
