package readme_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.LeakOptions()...) }

// The README section that shows the snippet, and the markers around the
// snippet in snippet_test.go.
const (
	readmeSection = "## The library on one page"
	beginMarker   = "// readme:begin\n"
	endMarker     = "// readme:end\n"
)

// TestREADMEShowsTheSnippet: the README's library code is exactly the
// tested snippet, so it compiles and runs as shown.
func TestREADMEShowsTheSnippet(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n"+readmeSection+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", readmeSection)
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatalf("README.md's %q section has no go code block", readmeSection)
	}
	shown, _, ok := strings.Cut(block, "```\n")
	if !ok {
		t.Fatalf("README.md's %q code block does not end", readmeSection)
	}

	src, err := os.ReadFile("snippet_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), beginMarker)
	if !ok {
		t.Fatalf("snippet_test.go has no %q", beginMarker)
	}
	tested, _, ok := strings.Cut(rest, endMarker)
	if !ok {
		t.Fatalf("snippet_test.go has no %q", endMarker)
	}
	if want := strings.TrimSpace(tested); strings.TrimSpace(shown) != want {
		t.Fatalf("README.md's library code differs from snippet_test.go; paste this between its ```go fences:\n%s", want)
	}
}

// TestSnippetRuns runs the snippet against an embedded etcd: its first
// call, made right after the server starts, succeeds (WaitForReady), and it
// shuts down cleanly when its context ends.
func TestSnippetRuns(t *testing.T) {
	c := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := lineWriter(make(chan string, 4))
	done := make(chan error, 1)
	go func() { done <- run(ctx, c.Endpoints()[0], out) }()

	select {
	case line := <-out:
		if !strings.HasPrefix(line, "Ada Lovelace, served by 127.0.0.1:") {
			t.Fatalf("the snippet printed %q, want Ada Lovelace served by a loopback address", line)
		}
	case err := <-done:
		t.Fatalf("the snippet returned before its call answered: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the snippet's first call did not answer within 30s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the snippet returned %v after its context ended, want nil", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the snippet did not return within 40s of its context's end (shutdown timeout 30s)")
	}
}

// lineWriter sends each Write to the channel as one string.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}
