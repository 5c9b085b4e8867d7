package readme_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.LeakOptions()...) }

// The markers around a program in its test file.
const (
	beginMarker = "// readme:begin\n"
	endMarker   = "// readme:end\n"
)

// TestREADMEShowsTheSnippet: the README's library code is exactly the
// tested snippet, so it compiles and runs as shown.
func TestREADMEShowsTheSnippet(t *testing.T) {
	checkShown(t, "../../README.md", "## The library on one page", "snippet_test.go")
}

// TestLIBRARYShowsTheExplicitProgram: docs/LIBRARY.md's program, each part
// made by hand, is exactly the tested one.
func TestLIBRARYShowsTheExplicitProgram(t *testing.T) {
	checkShown(t, "../../docs/LIBRARY.md", "## The program", "explicit_test.go")
}

// checkShown fails unless the first go code block of doc's section is
// the code between src's markers.
func checkShown(t *testing.T, doc, section, src string) {
	t.Helper()
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(text), "\n"+section+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", doc, section)
	}
	_, block, ok := strings.Cut(body, "```go\n")
	if !ok {
		t.Fatalf("%s's %q section has no go code block", doc, section)
	}
	shown, _, ok := strings.Cut(block, "```\n")
	if !ok {
		t.Fatalf("%s's %q code block does not end", doc, section)
	}

	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(code), beginMarker)
	if !ok {
		t.Fatalf("%s has no %q", src, beginMarker)
	}
	tested, _, ok := strings.Cut(rest, endMarker)
	if !ok {
		t.Fatalf("%s has no %q", src, endMarker)
	}
	if want := strings.TrimSpace(tested); strings.TrimSpace(shown) != want {
		t.Fatalf("%s's code differs from %s; paste this between its ```go fences:\n%s", doc, src, want)
	}
}

// TestSnippetRuns runs the README's program against an embedded etcd.
func TestSnippetRuns(t *testing.T) { checkRuns(t, run) }

// TestExplicitProgramRuns runs docs/LIBRARY.md's program against an
// embedded etcd.
func TestExplicitProgramRuns(t *testing.T) { checkRuns(t, runExplicit) }

// checkRuns runs program against an embedded etcd: its first call, made
// right after the server starts, succeeds (WaitForReady), and it shuts
// down cleanly when its context ends, leaving no instance registered.
func checkRuns(t *testing.T, program func(context.Context, string, io.Writer) error) {
	c := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := lineWriter(make(chan string, 4))
	done := make(chan error, 1)
	go func() { done <- program(ctx, c.Endpoints()[0], out) }()

	select {
	case line := <-out:
		if !strings.HasPrefix(line, "Ada Lovelace, served by 127.0.0.1:") {
			t.Fatalf("the program printed %q, want Ada Lovelace served by a loopback address", line)
		}
	case err := <-done:
		t.Fatalf("the program returned before its call answered: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the program's first call did not answer within 30s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the program returned %v after its context ended, want nil", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the program did not return within 40s of its context's end (shutdown timeout 30s)")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	resp, err := c.Client(t).Get(cctx, registry.ServicePrefix(registry.DefaultPrefix, "user"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys of user left in etcd after the program returned, want 0", resp.Count)
	}
}

// lineWriter sends each Write to the channel as one string.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}
