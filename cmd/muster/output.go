package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/legacy"
)

// timeNow is the clock of the commands; tests replace it.
var timeNow = time.Now

// instanceJSON returns in as the JSON value a registrar stores for it, so
// that JSON output has the field names of the stored value.
func instanceJSON(in *registry.Instance) (json.RawMessage, error) {
	b, err := registry.Marshal(*in)
	if err != nil {
		return nil, fmt.Errorf("encode instance %s/%s: %w", in.Name, in.ID, err)
	}
	return b, nil
}

func instancesJSON(ins []*registry.Instance) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(ins))
	for _, in := range ins {
		b, err := instanceJSON(in)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// newTable returns a tabwriter for a table of columns separated by tabs.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// overrideNote explains the mark of a weight set by an operator's
// override in tables.
const overrideNote = "* weight set by an operator (muster weight or drain); muster undrain restores the registered one"

// writeInstanceTable writes one row per instance, in the given order. The
// ID column shows the ID operators name the instance by (muster drain,
// weight), also when it is the address; a weight set by an
// operator's override (overridden holds the IDs) is marked "*" and
// explained under the table. REGION follows ZONE; COLOR is the instance's
// color ("-": base).
// When the instances come from several clusters (--cluster), a CLUSTER
// column after ADDR names each one's; from a merged Discovery (--legacy),
// a SOURCE column says where each was found.
func writeInstanceTable(w io.Writer, ins []*registry.Instance, overridden map[string]bool, now time.Time) error {
	tw := newTable(w)
	sources, clustered := hasSources(ins), hasClusters(ins)
	head := "ID\tADDR"
	if clustered {
		head += "\tCLUSTER"
	}
	if sources {
		head += "\tSOURCE"
	}
	fmt.Fprintln(tw, head+"\tVERSION\tZONE\tREGION\tCOLOR\tWEIGHT\tMETADATA\tAGE")
	marked := false
	for _, in := range ins {
		age := "-"
		if !in.RegisteredAt.IsZero() {
			age = formatAge(now.Sub(in.RegisteredAt))
		}
		weight := strconv.Itoa(in.EffectiveWeight())
		if isOverridden(overridden, in) {
			weight += "*"
			marked = true
		}
		addr := cell(in.Addr)
		if clustered {
			addr += "\t" + cell(registry.ClusterOf(in))
		}
		if sources {
			addr += "\t" + cell(legacy.SourceOf(in))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			idCell(in), addr, cell(in.Version), cell(in.Zone), cell(in.Region), cell(colorOf(in)),
			weight, orDash(formatMetadata(shownMetadata(in))), age)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if marked {
		_, err := fmt.Fprintln(w, overrideNote)
		return err
	}
	return nil
}

// idCell is the ID column of an instance: its ID, also when that is its
// address (the default ID), since operators name instances by ID.
func idCell(in *registry.Instance) string {
	return cell(in.ID)
}

// idAddr names an instance in a line: "id addr", or the address alone
// when the ID is the address.
func idAddr(in *registry.Instance) string {
	if in.ID == in.Addr {
		return quoteIfNeeded(in.Addr)
	}
	return quoteIfNeeded(in.ID) + " " + quoteIfNeeded(in.Addr)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// cell makes s safe for a table cell: "-" when empty, quoted when it holds
// characters that would break the columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return quoteIfNeeded(s)
}

// formatMetadata renders metadata as k=v pairs sorted by key, separated by
// commas; keys and values holding separators or unprintable characters are
// quoted.
func formatMetadata(md map[string]string) string {
	parts := make([]string, 0, len(md))
	for _, k := range slices.Sorted(maps.Keys(md)) {
		parts = append(parts, quoteIfNeeded(k)+"="+quoteIfNeeded(md[k]))
	}
	return strings.Join(parts, ",")
}

func quoteIfNeeded(s string) string {
	for _, r := range s {
		if r == ',' || r == '=' || r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// formatAge renders a duration the way kubectl does for ages: 42s, 7m,
// 5h, 3d.
func formatAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// describeInstance renders the attributes of in after its ID and address,
// as in "(source go-zero, version v1.4.2, zone eu-1a, region eu-1, color
// blue, weight 100, metadata color=blue)", the source only for an instance
// from a merged Discovery (--legacy), led by "cluster eu" for one from
// several clusters (--cluster); the weight is marked "(override)"
// when overridden.
func describeInstance(in *registry.Instance, overridden bool) string {
	var parts []string
	if c := registry.ClusterOf(in); c != "" {
		parts = append(parts, "cluster "+c)
	}
	if src := legacy.SourceOf(in); src != "" {
		parts = append(parts, "source "+quoteIfNeeded(src))
	}
	if in.Version != "" {
		parts = append(parts, "version "+quoteIfNeeded(in.Version))
	}
	if in.Zone != "" {
		parts = append(parts, "zone "+quoteIfNeeded(in.Zone))
	}
	if in.Region != "" {
		parts = append(parts, "region "+quoteIfNeeded(in.Region))
	}
	if c := colorOf(in); c != "" {
		parts = append(parts, "color "+quoteIfNeeded(c))
	}
	w := "weight " + strconv.Itoa(in.EffectiveWeight())
	switch {
	case in.EffectiveWeight() == 0 && overridden:
		w += " (draining, override)"
	case in.EffectiveWeight() == 0:
		w += " (draining)"
	case overridden:
		w += " (override)"
	}
	parts = append(parts, w)
	if md := shownMetadata(in); len(md) > 0 {
		parts = append(parts, "metadata "+formatMetadata(md))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// describeChange lists the fields that differ between two versions of an
// instance, as in "weight 100->0, version v1->v2". A weight change says
// "by override" when cur's weight is an operator's override, "override
// removed" when old's was.
func describeChange(old, cur *registry.Instance, wasOverridden, overridden bool) string {
	var parts []string
	str := func(field, a, b string) {
		if a != b {
			parts = append(parts, fmt.Sprintf("%s %s->%s", field, cell(a), cell(b)))
		}
	}
	str("source", legacy.SourceOf(old), legacy.SourceOf(cur))
	str("addr", old.Addr, cur.Addr)
	str("version", old.Version, cur.Version)
	str("zone", old.Zone, cur.Zone)
	str("region", old.Region, cur.Region)
	str("color", colorOf(old), colorOf(cur))
	if ow, cw := old.EffectiveWeight(), cur.EffectiveWeight(); ow != cw {
		w := fmt.Sprintf("weight %d->%d", ow, cw)
		switch {
		case overridden:
			parts = append(parts, w+" by override")
		case wasOverridden:
			parts = append(parts, w, "override removed")
		default:
			parts = append(parts, w)
		}
	}
	if a, b := formatMetadata(shownMetadata(old)), formatMetadata(shownMetadata(cur)); a != b {
		parts = append(parts, fmt.Sprintf("metadata {%s}->{%s}", a, b))
	}
	if !old.RegisteredAt.Equal(cur.RegisteredAt) {
		parts = append(parts, "re-registered")
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// plural renders a count of things: "1 instance", "2 instances".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
