package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/registry"
)

// ErrNoInstance is returned by SetOverride when the instance is not
// registered. It matches registry.ErrNoInstance.
var ErrNoInstance = fmt.Errorf("zookeeper: %w", registry.ErrNoInstance)

// override is an operator's override of one instance, bound to the
// instance's registration by its RegisteredAt: a new process registering
// the same ID (a new RegisteredAt) is not affected, while a registrar that
// writes its nodes again under a new session keeps the override.
type override struct {
	registry.Override
	RegisteredAt time.Time `json:"registered_at"`
}

func (o override) appliesTo(in registry.Instance) bool {
	return o.RegisteredAt.Equal(in.RegisteredAt)
}

// wireOverrides is the value of a service's persistent node:
// {"v":1,"overrides":{"<id>":{"weight":N,"registered_at":"..."}}}.
type wireOverrides struct {
	V         int                 `json:"v"`
	Overrides map[string]override `json:"overrides,omitempty"`
}

// parseOverrides decodes a service node's value; an empty value has none.
func parseOverrides(data []byte) (map[string]override, error) {
	if len(data) == 0 {
		return nil, nil
	}
	var w wireOverrides
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: overrides: %v", registry.ErrMalformedValue, err)
	}
	if w.V != registry.SchemaVersion {
		return nil, fmt.Errorf("%w: overrides have v=%d, this code reads v=%d", registry.ErrUnsupportedVersion, w.V, registry.SchemaVersion)
	}
	for id, o := range w.Overrides {
		if _, err := registry.MarshalOverride(o.Override); err != nil {
			return nil, fmt.Errorf("override of %s: %w", id, err)
		}
	}
	return w.Overrides, nil
}

// SetOverride writes an operator's override of one registered instance
// (registry.Override: weight, 0 drains) into the value of the service's
// persistent node, where every Discovery's watch of the service sees it.
// It applies to the instance's current registration only (by its
// RegisteredAt) and is dropped when the instance is gone. It fails with
// ErrNoInstance if the instance is not registered. Of the options only
// WithRoot, WithSessionTimeout, WithRequestTimeout and WithLogger apply.
func SetOverride(ctx context.Context, servers []string, service, id string, o registry.Override, opts ...Option) error {
	if _, err := registry.MarshalOverride(o); err != nil {
		return err
	}
	return editOverrides(ctx, servers, service, id, opts, func(c *zk.Conn, all map[string]override, op string) (bool, error) {
		data, _, err := c.Get(op)
		if errors.Is(err, zk.ErrNoNode) {
			return false, fmt.Errorf("%w: %s/%s", ErrNoInstance, service, id)
		}
		if err != nil {
			return false, err
		}
		in, err := registry.Unmarshal(data)
		if err != nil {
			return false, err
		}
		all[id] = override{Override: o, RegisteredAt: in.RegisteredAt}
		return true, nil
	})
}

// ClearOverride removes an operator's override of an instance, if any: it
// writes nothing (and returns nil) when there is none, even when the
// service has no node. Of the options only WithRoot, WithSessionTimeout,
// WithRequestTimeout and WithLogger apply.
func ClearOverride(ctx context.Context, servers []string, service, id string, opts ...Option) error {
	err := editOverrides(ctx, servers, service, id, opts, func(_ *zk.Conn, all map[string]override, _ string) (bool, error) {
		_, had := all[id]
		delete(all, id)
		return had, nil
	})
	if errors.Is(err, errNoServiceNode) {
		return nil
	}
	return err
}

// errNoServiceNode is editOverrides' error when the service has no node.
var errNoServiceNode = fmt.Errorf("%w: no service node", ErrNoInstance)

// editOverrides reads the service's overrides, drops those whose instance
// is gone, applies edit and, when edit or the drop changed anything (edit
// reports whether it did), writes them back if the node did not change
// meanwhile (retrying otherwise). It fails with errNoServiceNode when the
// service has no node.
func editOverrides(ctx context.Context, servers []string, service, id string, opts []Option,
	edit func(c *zk.Conn, all map[string]override, instancePath string) (bool, error)) error {
	if err := registry.ValidateName(service); err != nil {
		return err
	}
	if err := registry.ValidateID(id); err != nil {
		return err
	}
	return oneShot(ctx, servers, opts, func(ctx context.Context, c *zk.Conn, o options) error {
		return editNode(ctx, c, o, service, id, edit)
	})
}

// editNode is editOverrides on c.
func editNode(ctx context.Context, c *zk.Conn, o options, service, id string,
	edit func(c *zk.Conn, all map[string]override, instancePath string) (bool, error)) error {
	sp := servicePath(o.root, service)
	return call(ctx, func() error {
		for ctx.Err() == nil {
			data, stat, err := c.Get(sp)
			if errors.Is(err, zk.ErrNoNode) {
				return fmt.Errorf("%w: %s/%s", errNoServiceNode, service, id)
			}
			if err != nil {
				return err
			}
			all, err := parseOverrides(data)
			changed := err != nil // a bad value is replaced
			if err != nil {
				all = nil
			}
			if all == nil {
				all = map[string]override{}
			}
			children, _, err := c.Children(sp)
			if err != nil {
				return err
			}
			live := map[string]bool{}
			for _, ch := range children {
				live[ch] = true
			}
			for k := range all {
				if !live[k] {
					delete(all, k)
					changed = true
				}
			}
			edited, err := edit(c, all, nodePath(o.root, service, id))
			if err != nil {
				return err
			}
			if !edited && !changed {
				return nil
			}
			val, err := json.Marshal(wireOverrides{V: registry.SchemaVersion, Overrides: all})
			if err != nil {
				return err
			}
			if _, err := c.Set(sp, val, stat.Version); errors.Is(err, zk.ErrBadVersion) {
				continue
			} else if err != nil {
				return fmt.Errorf("zookeeper: write overrides of %s: %w", service, err)
			}
			return nil
		}
		return ctx.Err()
	})
}

// Overrides returns the operators' overrides that apply to the current
// instances of service, by instance ID (what SetOverride wrote for each
// instance's current registration).
func (d *Discovery) Overrides(ctx context.Context, service string) (map[string]registry.Override, error) {
	if err := registry.ValidateName(service); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.requestTimeout)
	defer cancel()
	out := map[string]registry.Override{}
	err := call(ctx, func() error {
		data, _, err := d.conn.Get(servicePath(d.o.root, service))
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		all, err := parseOverrides(data)
		if err != nil {
			return err
		}
		for id, o := range all {
			value, _, err := d.conn.Get(nodePath(d.o.root, service, id))
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return err
			}
			if in, err := registry.Unmarshal(value); err == nil && o.appliesTo(in) {
				out[id] = o.Override
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("zookeeper: overrides of %s: %w", service, err)
	}
	return out, nil
}

// Registered returns the value instance id of service was registered with
// (without overrides). It fails with ErrNoInstance if there is no such
// node.
func (d *Discovery) Registered(ctx context.Context, service, id string) (registry.Instance, error) {
	if err := registry.ValidateName(service); err != nil {
		return registry.Instance{}, err
	}
	if err := registry.ValidateID(id); err != nil {
		return registry.Instance{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.requestTimeout)
	defer cancel()
	var value []byte
	err := call(ctx, func() error {
		var err error
		value, _, err = d.conn.Get(nodePath(d.o.root, service, id))
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return registry.Instance{}, fmt.Errorf("%w: %s/%s", ErrNoInstance, service, id)
	}
	if err != nil {
		return registry.Instance{}, fmt.Errorf("zookeeper: read %s/%s: %w", service, id, err)
	}
	return registry.Unmarshal(value)
}
