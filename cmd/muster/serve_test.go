package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestServeLogsReadyStopsCleanlyAndKeepsData(t *testing.T) {
	dir := t.TempDir()
	s1 := startServe(t, dir)
	if want := "ready, clients use --endpoints " + s1.endpoint; !strings.Contains(s1.stderr.String(), want) {
		t.Fatalf("serve's log does not say %q:\n%s", want, s1.stderr)
	}
	if s1.endpoint != s1.opts.clientURL {
		t.Fatalf("serve reported endpoint %s, want its client URL %s", s1.endpoint, s1.opts.clientURL)
	}
	cli := newClient(t, s1.endpoint)
	putRaw(t, cli, "test/kept", "across restarts")
	cli.Close()

	s1.stop(t)
	log := s1.stderr.String()
	if !regexp.MustCompile(`(?s)msg=stopping.*msg=stopped`).MatchString(log) {
		t.Fatalf("serve did not log stopping and stopped:\n%s", log)
	}
	if strings.Contains(log, "ERROR") {
		t.Fatalf("a clean stop logged errors:\n%s", log)
	}

	// A second serve on the same directory, on other ports, has the data.
	s2 := startServe(t, dir)
	cli = newClient(t, s2.endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, "test/kept")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "across restarts" {
		t.Fatalf("after restart the key holds %v, want the value written before", resp.Kvs)
	}
}

// serveFails runs serve with o and returns its error, failing the test if
// it starts or takes long.
func serveFails(t *testing.T, o serveOptions) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, o, &syncBuffer{}, func(string) { t.Errorf("serve with %+v became ready; want a failure", o) })
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("serve with %+v returned nil, want an error", o)
		}
		return err
	case <-timer.C:
		cancel()
		<-done
		t.Fatalf("serve with %+v neither failed nor became ready within 10s", o)
		return nil
	}
}

func TestServeFailsClearly(t *testing.T) {
	running := startServe(t, t.TempDir())

	t.Run("client port in use", func(t *testing.T) {
		urls := freeLoopbackURLs(t, 1)
		err := serveFails(t, serveOptions{dataDir: t.TempDir(), clientURL: running.opts.clientURL, peerURL: urls[0], name: "x"})
		for _, want := range []string{"address already in use", running.opts.clientURL[len("http://"):], "--listen-client-url"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})
	t.Run("data dir in use", func(t *testing.T) {
		urls := freeLoopbackURLs(t, 2)
		err := serveFails(t, serveOptions{dataDir: running.opts.dataDir, clientURL: urls[0], peerURL: urls[1], name: "test"})
		if !strings.Contains(err.Error(), "in use by another running server") {
			t.Errorf("error %q does not say the data directory is in use", err)
		}
	})
	t.Run("data dir is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		urls := freeLoopbackURLs(t, 2)
		err := serveFails(t, serveOptions{dataDir: file, clientURL: urls[0], peerURL: urls[1], name: "x"})
		if !strings.Contains(err.Error(), "--data-dir "+file) || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("error %q does not name the data dir and say it is not a directory", err)
		}
	})
	t.Run("peer port in use", func(t *testing.T) {
		// etcd's own log of the failure is not shown: serve's error
		// says it, with a hint.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		urls := freeLoopbackURLs(t, 1)
		r := run("serve", "--data-dir", t.TempDir(), "--listen-client-url", urls[0], "--listen-peer-url", "http://"+ln.Addr().String(), "--metrics-listen", "")
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != exitFailure || len(lines) != 2 || !strings.HasPrefix(lines[0], "muster: serve: ") || !strings.Contains(lines[1], "choose free ports") {
			t.Fatalf("serve on a taken peer port: exit %d, stderr:\n%s\nwant exit 1, serve's error and its hint only", r.code, r.stderr)
		}
	})
	t.Run("exit code", func(t *testing.T) {
		urls := freeLoopbackURLs(t, 1)
		r := run("serve", "--data-dir", t.TempDir(), "--listen-client-url", running.opts.clientURL, "--listen-peer-url", urls[0])
		if r.code != exitFailure {
			t.Fatalf("serve on a taken port: exit code %d, want %d; stderr:\n%s", r.code, exitFailure, r.stderr)
		}
		if !strings.HasPrefix(r.stderr, "muster: serve: ") || strings.Contains(r.stderr, "Usage:") {
			t.Fatalf("stderr should be the error without usage, got:\n%s", r.stderr)
		}
	})
}

func TestServeFailedStartReleasesDataDir(t *testing.T) {
	// A listener we hold is a peer port serve cannot take; the failed
	// start must not leave the data directory locked.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	urls := freeLoopbackURLs(t, 1)
	dir := t.TempDir()
	serveFails(t, serveOptions{dataDir: dir, clientURL: urls[0], peerURL: "http://" + ln.Addr().String(), name: "x"})
	// The failed start released the data directory.
	startServe(t, dir)
}

// Serve's listen URLs and the other commands' --endpoints take host:port
// for http://host:port alike.
func TestServeAndEndpointsTakeHostPort(t *testing.T) {
	urls := freeLoopbackURLs(t, 2)
	client, peer := strings.TrimPrefix(urls[0], "http://"), strings.TrimPrefix(urls[1], "http://")
	o := serveOptions{dataDir: t.TempDir(), clientURL: client, peerURL: peer, name: "test"}
	if err := o.validate(true); err != nil {
		t.Fatalf("serve --listen-client-url %s --listen-peer-url %s: %v", client, peer, err)
	}
	s, err := tryServe(t, o)
	if err != nil {
		t.Fatalf("serve did not start: %v", err)
	}
	if s.endpoint != urls[0] {
		t.Fatalf("serve reports endpoint %s, want %s", s.endpoint, urls[0])
	}
	r := runOK(t, "ls", "--endpoints", client)
	if !strings.Contains(r.stderr, "no services") {
		t.Fatalf("ls --endpoints %s on an empty registry: stderr %q", client, r.stderr)
	}
}

// Without --data-dir, serve keeps its data in the user's state directory,
// not in the working directory, and says where.
func TestServeDefaultDataDir(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	urls := freeLoopbackURLs(t, 2)
	o := serveOptions{clientURL: urls[0], peerURL: urls[1], name: "test"}
	if err := o.validate(false); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(state, "muster", "etcd")
	if o.dataDir != want {
		t.Fatalf("default data dir %s, want %s", o.dataDir, want)
	}
	s, err := tryServe(t, o)
	if err != nil {
		t.Fatalf("serve did not start: %v", err)
	}
	if !strings.Contains(s.stderr.String(), "; data in "+want) {
		t.Fatalf("serve does not say where its data is:\n%s", s.stderr)
	}
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("data dir: %v", err)
	}
	// A relative XDG_STATE_HOME is ignored, as the XDG spec says.
	t.Setenv("XDG_STATE_HOME", "relative")
	t.Setenv("HOME", state)
	if dir, err := defaultDataDir(); err != nil || !filepath.IsAbs(dir) {
		t.Fatalf("defaultDataDir with a relative XDG_STATE_HOME = %q, %v; want an absolute path", dir, err)
	}
}

// --insecure-listen-anywhere lets serve listen on any address (checked on
// the flags alone: the test binds nothing beyond loopback).
func TestServeInsecureListenAnywhere(t *testing.T) {
	o := serveOptions{dataDir: t.TempDir(), name: "default",
		clientURL: "http://0.0.0.0:23790", peerURL: "http://[::]:23800"}
	if err := o.validate(true); err == nil || !strings.Contains(err.Error(), "--insecure-listen-anywhere") {
		t.Fatalf("validate without --insecure-listen-anywhere: %v, want the refusal naming it", err)
	}
	o.insecureAnywhere = true
	if err := o.validate(true); err != nil {
		t.Fatalf("validate with --insecure-listen-anywhere: %v", err)
	}
	for _, u := range []string{"http://127.0.0.1:1", "http://127.9.9.9:1", "http://[::1]:1", "http://localhost:1"} {
		if !loopbackURL(u) {
			t.Errorf("%s is not taken for loopback", u)
		}
	}
	for _, u := range []string{"http://0.0.0.0:1", "http://[::]:1", "http://10.0.0.1:1", "http://[fe80::1]:1"} {
		if loopbackURL(u) {
			t.Errorf("%s is taken for loopback", u)
		}
	}
}
