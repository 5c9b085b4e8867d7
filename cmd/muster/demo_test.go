package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
