package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's first command, headless: it must end by itself, exit 0 and
// report every promise held.
func TestDemoRunsHeadlessAndKeepsItsPromises(t *testing.T) {
	var out, errb bytes.Buffer
	code := execute(context.Background(), []string{"demo", "--duration", "30s"}, &out, &errb)
	text := out.String()
	summary := text
	if i := strings.Index(text, "Summary:"); i >= 0 {
		summary = text[i:]
	}
	t.Log(summary)
	if code != 0 {
		t.Fatalf("muster demo exited %d; stderr %s\n%s", code, errb.String(), summary)
	}
	for _, want := range []string{
		"Every promise held.",
		"[held  ] calls go on while etcd is down",
		"[held  ] a graceful shutdown fails no call",
	} {
		if !strings.Contains(summary, want) {
			t.Fatalf("summary lacks %q:\n%s", want, summary)
		}
	}
	if strings.Contains(text, "\033[") {
		t.Fatalf("output to a non-terminal has escape codes")
	}
	// Measured from the crash, which cannot revoke the lease: about the
	// TTL (2s, renewed every 667ms, so at least 1.33s), at most TTL + 1s;
	// below TTL/2 the "crash" revoked it.
	m := regexp.MustCompile(`gone (\S+) after the crash`).FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("summary has no crash figure:\n%s", summary)
	}
	gone, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if gone < time.Second || gone > 3*time.Second {
		t.Fatalf("the crashed backend was gone %v after the crash, want 1s..3s (TTL 2s)", gone)
	}
	// The intro says what comes, and the legend what the columns mean,
	// before the first table.
	first := strings.Index(text, "NAME")
	for _, want := range []string{"b2 crashes", "SHARE is", "P50 and P99", "shown from 20 calls"} {
		if i := strings.Index(text, want); i < 0 || i > first {
			t.Fatalf("%q is not before the first table:\n%s", want, text[:max(first, 0)])
		}
	}
	if strings.Contains(text, "ZONE") {
		t.Fatalf("the table shows zones the client ignores")
	}
}

func TestDemoUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--duration", "5s"},
		{"demo", "--backends", "2"},
		{"demo", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := execute(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("muster %v exited %d, want 2; stderr %s", args, code, errb.String())
		}
	}
}
