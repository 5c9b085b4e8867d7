package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/musterhq/muster/internal/testkit/syncbuf"
)

// etcdAlarms logs each alarm once when it is raised (at the first read
// too: an alarm outlives a restart) and once when it is cleared, and Err
// and muster_etcd_alarm tell what the last read found.
func TestEtcdAlarms(t *testing.T) {
	raised := []string{"NOSPACE"}
	var logs syncbuf.Buffer
	a := watchAlarms(func() []string { return raised }, 1<<20, slog.New(slog.NewTextHandler(&logs, nil)))
	if err := a.Close(); err != nil { // the test reads from now on
		t.Fatal(err)
	}
	check := func(what string, logged []string, metrics, health string) {
		t.Helper()
		for _, want := range logged {
			if n := strings.Count(logs.String(), want); n != 1 {
				t.Errorf("%s: %q logged %d times, want once; log:\n%s", what, want, n, &logs)
			}
		}
		if err := testutil.CollectAndCompare(a, strings.NewReader(metrics)); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		if err := a.Err(); health == "" && err != nil || health != "" && (err == nil || !strings.Contains(err.Error(), health)) {
			t.Errorf("%s: Err() = %v, want %q", what, err, health)
		}
	}
	const header = "# HELP muster_etcd_alarm 1 while the embedded etcd has the alarm raised (NOSPACE: the database reached --quota-backend-bytes, " +
		"writes and lease grants are refused; CORRUPT: the data failed a consistency check), else 0.\n# TYPE muster_etcd_alarm gauge\n"

	check("raised at the start", []string{`level=ERROR msg="etcd raised the alarm NOSPACE: the database reached its quota of 1048576 bytes`},
		header+"muster_etcd_alarm{alarm=\"CORRUPT\"} 0\nmuster_etcd_alarm{alarm=\"NOSPACE\"} 1\n",
		"etcd alarm NOSPACE: the database reached its quota of 1048576 bytes")

	raised = []string{"CORRUPT", "NOSPACE"}
	a.poll()
	check("a second alarm", []string{`level=ERROR msg="etcd raised the alarm CORRUPT: the data failed etcd's consistency check`, "alarm NOSPACE:"},
		header+"muster_etcd_alarm{alarm=\"CORRUPT\"} 1\nmuster_etcd_alarm{alarm=\"NOSPACE\"} 1\n",
		"etcd alarm CORRUPT: the data failed etcd's consistency check; etcd refuses every write and lease grant, so no instance can register or re-register, until an operator restores it and disarms the alarm; etcd alarm NOSPACE")

	raised = nil
	a.poll()
	check("cleared", []string{`level=INFO msg="etcd cleared the alarm CORRUPT: it takes writes again" alarm=CORRUPT`,
		`level=INFO msg="etcd cleared the alarm NOSPACE: it takes writes again" alarm=NOSPACE`},
		header+"muster_etcd_alarm{alarm=\"CORRUPT\"} 0\nmuster_etcd_alarm{alarm=\"NOSPACE\"} 0\n", "")
}
