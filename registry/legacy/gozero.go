package legacy

import (
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

var _ etcd.Layout = (*GoZero)(nil)

// GoZero is the layout of go-zero's core/discov: key "<key>/<id>" (the id
// is the publisher's lease ID in decimal, or its configured Etcd.ID), value
// the plain string "host:port". go-zero's readers read every key under
// "<key>/". The <key> of a service is its name unless WithName maps it
// (go-zero services are usually published as "<name>.rpc").
type GoZero struct{ o options }

// NewGoZero returns go-zero's layout; WithName maps Muster service names to
// go-zero keys.
func NewGoZero(opts ...Option) (*GoZero, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &GoZero{o: o}, nil
}

// String names the layout, "go-zero", as Discovery logs and the muster
// command do.
func (g *GoZero) String() string { return "go-zero" }

// Prefix returns "<key>/", the prefix go-zero's readers read.
func (g *GoZero) Prefix(service string) string { return g.o.name(service) + "/" }

// Decode reads a go-zero value: the instance's address. Its ID is the key's
// suffix, escaped where it is not a valid ID.
func (g *GoZero) Decode(service, suffix string, value []byte) (registry.Instance, error) {
	return registry.Instance{Name: service, ID: instanceID(suffix), Addr: string(value)}, nil
}
