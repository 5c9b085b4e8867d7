package legacy

import (
	"encoding/json"
	"fmt"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// Each layout reads a mirrored instance back with the ID it was written
// under, but for '%': the layouts take IDs from key suffixes, where '%'
// is escaped as "%25" (see instanceID), so an ID with a '%' reads back
// escaped. The merged view matches instances by address, not ID.
var (
	_ etcd.Mirror = (*GoZero)(nil)
	_ etcd.Mirror = (*Kratos)(nil)
	_ etcd.Mirror = (*Naming)(nil)
)

// Mirror returns in in go-zero's layout: key "<key>/<ID>", value its
// address. go-zero's readers use the key only to tell values apart, so the
// ID (stable across re-registrations) stands where go-zero puts its lease
// ID (which is not).
func (g *GoZero) Mirror(in registry.Instance) (string, []byte, error) {
	return g.Prefix(in.Name) + in.ID, []byte(in.Addr), nil
}

// Mirror returns in in Kratos's layout: key "<namespace>/<name>/<ID>",
// value a ServiceInstance with one endpoint, "grpc://<addr>?isSecure=false"
// (Muster's Instance does not say whether the server uses TLS), and the
// instance's version and metadata.
func (k *Kratos) Mirror(in registry.Instance) (string, []byte, error) {
	md := in.Metadata
	if md == nil {
		md = map[string]string{}
	}
	v, err := json.Marshal(kratosInstance{
		ID: in.ID, Name: k.o.name(in.Name), Version: in.Version, Metadata: md,
		Endpoints: []string{"grpc://" + in.Addr + "?isSecure=false"},
	})
	if err != nil {
		return "", nil, fmt.Errorf("legacy: kratos value: %w", err)
	}
	return k.Prefix(in.Name) + in.ID, v, nil
}

// Mirror returns in in etcd naming's layout: key "<target>/<ID>", value
// {"Op":0,"Addr":<addr>,"Metadata":<metadata or null>}.
func (n *Naming) Mirror(in registry.Instance) (string, []byte, error) {
	var md any
	if len(in.Metadata) > 0 {
		md = in.Metadata
	}
	v, err := json.Marshal(namingUpdate{Addr: in.Addr, Metadata: md})
	if err != nil {
		return "", nil, fmt.Errorf("legacy: etcd naming value: %w", err)
	}
	return n.Prefix(in.Name) + in.ID, v, nil
}
