package legacy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/musterhq/muster/registry"
)

// DefaultKratosNamespace is the key prefix of Kratos's etcd registry unless
// it was configured with another (its registry.Namespace option).
const DefaultKratosNamespace = "/microservices"

type options struct {
	names     map[string]string // Muster service -> name in the legacy layout
	namespace string            // Kratos only
	err       error
}

// Option configures a layout. An invalid option makes the constructor fail
// with an error naming it.
type Option func(*options)

func buildOptions(opts []Option) (options, error) {
	o := options{names: map[string]string{}, namespace: DefaultKratosNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	return o, o.err
}

func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("legacy: "+format, args...))
}

// WithName maps the Muster service name to legacyName, its name in the
// legacy layout: go-zero's Etcd.Key (such as "user.rpc"), Kratos's service
// name, or etcd naming's target. By default a service's legacy name is its
// Muster name. An invalid service name, an empty legacy name, or one that
// starts or ends with "/" (go-zero's and etcd naming's keys are
// "<name>/<id>", Kratos's "<namespace>/<name>/<id>") is an error.
func WithName(service, legacyName string) Option {
	return func(o *options) {
		if err := registry.ValidateName(service); err != nil {
			o.invalid("WithName(%q, %q): %w", service, legacyName, err)
			return
		}
		if legacyName == "" || strings.HasSuffix(legacyName, "/") {
			o.invalid("WithName(%q, %q): the legacy name must be non-empty and not end with '/'", service, legacyName)
			return
		}
		o.names[service] = legacyName
	}
}

// WithKratosNamespace sets the key prefix of Kratos's registry, by default
// DefaultKratosNamespace ("/microservices"). It must start with "/" and not
// end with it; otherwise it is an error. Other layouts ignore it.
func WithKratosNamespace(ns string) Option {
	return func(o *options) {
		if !strings.HasPrefix(ns, "/") || strings.HasSuffix(ns, "/") {
			o.invalid("WithKratosNamespace(%q): want a prefix starting with '/' and not ending with it", ns)
			return
		}
		o.namespace = ns
	}
}

// name returns the legacy name of service.
func (o *options) name(service string) string {
	if n, ok := o.names[service]; ok {
		return n
	}
	return service
}
