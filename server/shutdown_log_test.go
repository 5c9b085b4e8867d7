package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/server"
)

// TestShutdownLogsItsSteps: an operator who stops a server sees each step
// of Shutdown, in order, ending with how long it took.
func TestShutdownLogsItsSteps(t *testing.T) {
	e := newEnv(t)
	// Written by Serve before Ready and by Shutdown: read after both.
	logs := &bytes.Buffer{}
	b := e.start(t, "a", server.WithLogger(slog.New(slog.NewTextHandler(logs, nil))), server.WithDrainDelay(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	text := logs.String()
	at := 0
	for _, step := range []string{
		"serving and registered",
		"shutting down: health NOT_SERVING; deregistering",
		"draining: still serving",
		"stopping: open streams end with UNAVAILABLE",
		"msg=stopped",
		"took=",
	} {
		i := strings.Index(text[at:], step)
		if i < 0 {
			t.Fatalf("no %q after offset %d in the log:\n%s", step, at, text)
		}
		at += i + len(step)
	}
}
