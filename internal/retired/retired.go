// Package retired keeps a Discovery's list of deliberate departures
// (registry.Snapshot.Retired): the IDs of instances deleted while
// Draining, oldest first, at most registry.MaxRetired. Every backend that
// records departures keeps the list with these two functions, so that
// their clients see the same rules. The lists are published in snapshots
// and so never modified: each function returns a new list when it
// changes one.
package retired

import (
	"slices"

	"github.com/musterhq/muster/registry"
)

// Add returns list with id as its newest entry: moved there if it was
// already listed, and the oldest entries dropped beyond
// registry.MaxRetired. list is not modified.
func Add(list []string, id string) []string {
	keep := Remove(list, id)
	if len(keep) >= registry.MaxRetired {
		keep = keep[len(keep)-registry.MaxRetired+1:]
	}
	return append(slices.Clip(keep), id)
}

// Remove returns list without id (an instance served again), or list
// itself when id is not in it. list is not modified.
func Remove(list []string, id string) []string {
	if i := slices.Index(list, id); i >= 0 {
		return slices.Delete(slices.Clone(list), i, i+1)
	}
	return list
}
