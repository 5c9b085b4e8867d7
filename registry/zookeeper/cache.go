package zookeeper

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/musterhq/muster/internal/retired"
	"github.com/musterhq/muster/registry"
)

// cache holds one service's nodes as last read and produces its sorted
// list. It is pure: no goroutine, clock or connection.
type cache struct {
	service   string
	nodes     map[string]node // by ID (node name)
	overrides map[string]override
	list      []*registry.Instance // the list build returned last: what is served

	// retired are the IDs of the instances deleted while served Draining,
	// oldest first, at most registry.MaxRetired; an ID served again
	// leaves it. Published as Snapshot.Retired, so never modified: a
	// change makes a new slice.
	retired []string
}

// node is one instance node as read: its value, the instance decoded from
// it (nil when the value is bad) and its modification zxid.
type node struct {
	value []byte
	in    *registry.Instance
	mzxid int64
}

func newCache(service string) *cache {
	return &cache{service: service, nodes: map[string]node{}, retired: []string{}}
}

// put records the value of node id; it returns the decoding error of a bad
// value (the node is kept out of the list).
func (c *cache) put(id string, value []byte, mzxid int64) error {
	if old, ok := c.nodes[id]; ok && bytes.Equal(old.value, value) {
		old.mzxid = mzxid
		c.nodes[id] = old
		return nil
	}
	if _, had := c.nodes[id]; !had {
		c.back(id)
	}
	n := node{value: append([]byte(nil), value...), mzxid: mzxid}
	in, err := registry.Unmarshal(value)
	switch {
	case err != nil:
	case in.Name != c.service || in.ID != id:
		err = fmt.Errorf("%w: value of node %s/%s names instance %s/%s", registry.ErrInvalidInstance, c.service, id, in.Name, in.ID)
	default:
		n.in = &in
	}
	c.nodes[id] = n
	return err
}

// remove forgets node id, deleted; changed reports that a change of its
// value was notified and not read (see left).
func (c *cache) remove(id string, changed bool) {
	if _, ok := c.nodes[id]; ok {
		c.left(id, changed)
		delete(c.nodes, id)
	}
}

// keep forgets every node not in ids, deleted; changed holds the IDs
// whose change of value was notified and not read (see left).
func (c *cache) keep(ids []string, changed map[string]bool) {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	for id := range c.nodes {
		if !set[id] {
			c.left(id, changed[id])
			delete(c.nodes, id)
		}
	}
}

// left records the deletion of node id: a deliberate departure (retired)
// if it was served Draining, or if its value changed just before the
// deletion (changed: the change was notified, and the node was gone when
// read). ZooKeeper's watches carry no values, so a Discovery may miss the
// Draining value a Registrar's Deregister writes just before it deletes
// the node; a deletion that was not deliberate (a session expired or
// closed) follows no change of value.
func (c *cache) left(id string, changed bool) {
	i, served := slices.BinarySearchFunc(c.list, id, func(in *registry.Instance, id string) int { return strings.Compare(in.ID, id) })
	if !changed && (!served || !c.list[i].Draining) {
		return
	}
	c.retired = retired.Add(c.retired, id)
}

// back removes id from the retired instances: its node is there again.
func (c *cache) back(id string) { c.retired = retired.Remove(c.retired, id) }

// has reports whether node id is known.
func (c *cache) has(id string) bool {
	_, ok := c.nodes[id]
	return ok
}

// setOverrides replaces the service's overrides.
func (c *cache) setOverrides(o map[string]override) { c.overrides = o }

// build returns the sorted list of valid instances with their overrides
// applied. An instance that did not change keeps its pointer from the
// previous list.
func (c *cache) build() []*registry.Instance {
	prev := make(map[string]*registry.Instance, len(c.list))
	for _, in := range c.list {
		prev[in.ID] = in
	}
	list := make([]*registry.Instance, 0, len(c.nodes))
	for id, n := range c.nodes {
		if n.in == nil {
			continue
		}
		in := *n.in
		if o, ok := c.overrides[id]; ok && o.appliesTo(in) {
			in = o.Override.Apply(in)
		}
		if p := prev[id]; p != nil && p.Equal(in) && p.RegisteredAt.Equal(in.RegisteredAt) {
			list = append(list, p)
			continue
		}
		list = append(list, &in)
	}
	slices.SortFunc(list, func(a, b *registry.Instance) int { return strings.Compare(a.ID, b.ID) })
	c.list = list
	return list
}
