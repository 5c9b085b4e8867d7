package legacy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

var _ etcd.Layout = (*Kratos)(nil)

// Kratos is the layout of Kratos's etcd registry (contrib/registry/etcd):
// key "<namespace>/<name>/<id>", value the JSON of Kratos's
// ServiceInstance: {"id","name","version","metadata":{},"endpoints":
// ["grpc://host:port?isSecure=false", ...]}. The namespace is
// "/microservices" unless WithKratosNamespace says otherwise; the Kratos
// name of a service is its Muster name unless WithName maps it.
type Kratos struct{ o options }

// kratosInstance is the JSON of a Kratos ServiceInstance.
type kratosInstance struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Version   string            `json:"version"`
	Metadata  map[string]string `json:"metadata"`
	Endpoints []string          `json:"endpoints"`
}

// NewKratos returns Kratos's layout.
func NewKratos(opts ...Option) (*Kratos, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Kratos{o: o}, nil
}

// String names the layout, "kratos", as Discovery logs and the muster
// command do.
func (k *Kratos) String() string { return "kratos" }

// Prefix returns "<namespace>/<name>/".
func (k *Kratos) Prefix(service string) string {
	return k.o.namespace + "/" + k.o.name(service) + "/"
}

// Decode reads a Kratos value: the address of its first grpc:// endpoint,
// its version and metadata. A value naming another service is left out
// (etcd.ErrNotInstance), as Kratos's own readers do. A value that is not
// JSON, has no grpc:// endpoint, or whose endpoint has no port is bad.
func (k *Kratos) Decode(service, suffix string, value []byte) (registry.Instance, error) {
	var v kratosInstance
	if err := json.Unmarshal(value, &v); err != nil {
		return registry.Instance{}, fmt.Errorf("legacy: kratos value: %w", err)
	}
	if v.Name != k.o.name(service) {
		return registry.Instance{}, etcd.ErrNotInstance
	}
	addr, err := kratosAddr(v.Endpoints)
	if err != nil {
		return registry.Instance{}, err
	}
	return registry.Instance{
		Name: service, ID: instanceID(suffix), Addr: addr,
		Version: v.Version, Metadata: v.Metadata,
	}, nil
}

// kratosAddr returns the host:port of the first grpc:// endpoint.
func kratosAddr(endpoints []string) (string, error) {
	var schemes []string
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return "", fmt.Errorf("legacy: kratos endpoint %q: %w", e, err)
		}
		if u.Scheme != "grpc" {
			schemes = append(schemes, u.Scheme)
			continue
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return "", fmt.Errorf("legacy: kratos endpoint %q: %w", e, err)
		}
		return u.Host, nil
	}
	if len(schemes) == 0 {
		return "", errors.New("legacy: kratos value has no endpoint")
	}
	return "", fmt.Errorf("legacy: kratos value has no grpc:// endpoint (schemes: %s)", strings.Join(schemes, ", "))
}
