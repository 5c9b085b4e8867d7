package xdscheck

import (
	"os"
	"strings"
	"testing"
)

// docs/XDS.md, "Client preconditions", lists every rule with its clients,
// property and sources, as Rules returns them.
func TestDocsListEveryRule(t *testing.T) {
	b, err := os.ReadFile("../../docs/XDS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Client preconditions\n")
	if !ok {
		t.Fatal(`docs/XDS.md has no "Client preconditions" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, r := range Rules() {
		row := "| `" + r.ID + "` | " + r.Clients + " | " + r.Says + " | " + r.Else + " | `" + strings.Join(r.Sources, "`; `") + "` |"
		if !strings.Contains(section, row) {
			t.Errorf("docs/XDS.md, Client preconditions: no row\n%s", row)
		}
	}
}
