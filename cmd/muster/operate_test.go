package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	_ "github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
)

func TestOperatorCommands(t *testing.T) {
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)
	a, b := testbackend.Start(t), testbackend.Start(t)
	register(t, r, registry.Instance{Name: "user", ID: "a", Addr: a.Addr})
	register(t, r, registry.Instance{Name: "user", ID: "b", Addr: b.Addr})

	// A live client, as a service would have.
	conn := dialLive(t, newClient(t, s.endpoint), "muster:///user")
	load := testbackend.StartLoad(conn, 2)
	defer load.Finish()
	load.WaitFor(t, a.Addr)
	load.WaitFor(t, b.Addr)

	ep := []string{"--endpoints", s.endpoint}
	got := runOK(t, append([]string{"get", "user", "a"}, ep...)...)
	if !strings.Contains(got.stdout, "a ") || !strings.Contains(got.stdout, a.Addr) {
		t.Fatalf("get user a:\n%s", got.stdout)
	}
	got = runOK(t, append([]string{"get", "user", "a", "-o", "json"}, ep...)...)
	if !strings.Contains(got.stdout, `"id": "a"`) && !strings.Contains(got.stdout, `"id":"a"`) {
		t.Fatalf("get -o json:\n%s", got.stdout)
	}
	// An unknown ID is an error on every command, naming service and ID.
	for _, cmd := range [][]string{{"get"}, {"deregister"}, {"drain"}, {"undrain"}, {"weight"}} {
		args := append(append(cmd, "user", "zz"), ep...)
		if cmd[0] == "weight" {
			args = append(args, "5")
		}
		r := run(args...)
		want := `muster: no such instance: service user has no instance zz ("muster ls user" lists its instances)` + "\n"
		if r.code != 1 || r.stderr != want || r.stdout != "" {
			t.Errorf("%s of a missing instance: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", cmd[0], r.code, r.stdout, r.stderr, want)
		}
	}
	// Without an override, undrain has nothing to do and says so.
	if got := runOK(t, append([]string{"undrain", "user", "a"}, ep...)...); got.stdout != "undrain user/a: nothing to do: no override (weight 100 as registered)\n" {
		t.Fatalf("undrain without an override printed %q", got.stdout)
	}

	got = runOK(t, append([]string{"drain", "user", "a"}, ep...)...)
	if got.stdout != "drain user/a: done, weight 100 -> 0\n" {
		t.Fatalf("drain printed %q", got.stdout)
	}
	if got := runOK(t, append([]string{"drain", "user", "a"}, ep...)...); got.stdout != "drain user/a: nothing to do: the override already sets weight 0\n" {
		t.Fatalf("a second drain printed %q", got.stdout)
	}
	// The live client stops sending to a: b gets the next 200 calls in a
	// row once the change has arrived.
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := a.Calls()
		load.WaitForMore(t, b.Addr, 200)
		if a.Calls() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a still gets calls 10s after the drain")
		}
	}
	if got := runOK(t, append([]string{"get", "user", "a", "-o", "json"}, ep...)...); !strings.Contains(got.stdout, `"weight": 0`) {
		t.Fatalf("a after drain:\n%s", got.stdout)
	}
	if got := runOK(t, append([]string{"weight", "user", "a", "300"}, ep...)...); got.stdout != "weight user/a: done, weight 0 -> 300\n" {
		t.Fatalf("weight printed %q", got.stdout)
	}
	if got := runOK(t, append([]string{"get", "user", "a", "-o", "json"}, ep...)...); !strings.Contains(got.stdout, `"weight": 300`) {
		t.Fatalf("a after weight 300:\n%s", got.stdout)
	}
	load.WaitForMore(t, a.Addr, 10) // back in traffic
	if got := runOK(t, append([]string{"undrain", "user", "a"}, ep...)...); got.stdout != "undrain user/a: override removed, weight 300 -> 100\n" {
		t.Fatalf("undrain printed %q", got.stdout)
	}
	if got := runOK(t, append([]string{"get", "user", "a", "-o", "json"}, ep...)...); !strings.Contains(got.stdout, `"weight": 100`) {
		t.Fatalf("a after undrain:\n%s", got.stdout)
	}

	// A live instance's registrar writes it again: the command says so.
	got = runOK(t, append([]string{"deregister", "user", "b"}, ep...)...)
	if !strings.HasPrefix(got.stdout, "deregister user/b: deleted\n") || !strings.Contains(got.stdout, "writes it again") || !strings.Contains(got.stdout, "muster drain user b") {
		t.Fatalf("deregister of a live instance does not say it comes back:\n%s", got.stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for run(append([]string{"get", "user", "b"}, ep...)...).code != 0 {
		if ctx.Err() != nil {
			t.Fatalf("b not written again by its registrar after deregister")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An entry no registrar holds stays deleted.
	if err := r.Deregister(ctx, "user", "b"); err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, s.endpoint)
	if _, err := cli.Put(ctx, "/muster/services/user/static", `{"v":1,"id":"static","name":"user","addr":"127.0.0.1:1"}`); err != nil {
		t.Fatal(err)
	}
	got = runOK(t, append([]string{"deregister", "user", "static"}, ep...)...)
	if got.stdout != "deregister user/static: deleted\n" {
		t.Fatalf("deregister of an entry without a lease says it comes back:\n%s", got.stdout)
	}
	if r := run(append([]string{"get", "user", "static"}, ep...)...); r.code != 1 {
		t.Fatalf("static entry readable after deregister: exit %d", r.code)
	}
	if r := run(append([]string{"drain", "user", "b"}, ep...)...); r.code != 1 || !strings.Contains(r.stderr, "no such instance") {
		t.Fatalf("drain of a deregistered instance: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestOperatorUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"get", "user"},
		{"drain", "user"},
		{"drain", "User", "a"},
		{"drain", "user", "a/b"},
		{"weight", "user", "a"},
		{"weight", "user", "a", "x"},
		{"weight", "user", "a", "10001"},
		{"weight", "user", "a", "-1"},
		{"deregister", "user", "a", "b"},
		{"get", "user", "a", "-o", "yaml"},
	} {
		if r := run(args...); r.code != 2 {
			t.Errorf("muster %v: exit %d, want 2; stderr %q", args, r.code, r.stderr)
		}
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))
