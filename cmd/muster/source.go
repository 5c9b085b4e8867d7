package main

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/legacy"
)

// hasSources reports whether some instance carries where a merged
// Discovery found it (--legacy): then tables have a SOURCE column.
func hasSources(ins []*registry.Instance) bool {
	return slices.ContainsFunc(ins, func(in *registry.Instance) bool { return legacy.SourceOf(in) != "" })
}

// shownMetadata is in's metadata as tables and lines show it: without the
// source a merged Discovery added and the cluster a several-cluster
// Discovery added, which they show on their own.
func shownMetadata(in *registry.Instance) map[string]string {
	_, source := in.Metadata[legacy.SourceKey]
	_, cluster := in.Metadata[registry.ClusterKey]
	if !source && !cluster {
		return in.Metadata
	}
	md := maps.Clone(in.Metadata)
	delete(md, legacy.SourceKey)
	delete(md, registry.ClusterKey)
	return md
}

// countSources counts instances per source; never nil.
func countSources(ins []*registry.Instance) map[string]int {
	out := map[string]int{}
	for _, in := range ins {
		out[legacy.SourceOf(in)]++
	}
	return out
}

// sourcesCell renders counts per source as "muster:2,go-zero:1": Muster's
// registry first, then the others by name; "-" for none.
func sourcesCell(counts map[string]int) string {
	names := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == legacy.PrimarySource:
			return -1
		case b == legacy.PrimarySource:
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, quoteIfNeeded(n)+":"+strconv.Itoa(counts[n]))
	}
	return orDash(strings.Join(parts, ","))
}

// isOverridden reports whether overridden (instance IDs in Muster's
// registry) marks in: never an instance a legacy source listed.
func isOverridden(overridden map[string]bool, in *registry.Instance) bool {
	src := legacy.SourceOf(in)
	return overridden[in.ID] && (src == "" || src == legacy.PrimarySource)
}
