package kubernetes

import (
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/util/validation"
)

// defaultNamespace is the namespace of a service named without one.
const defaultNamespace = "default"

type options struct {
	namespace    string
	port         string // "" means the slice's only port
	versionLabel string // "" means no version
	logger       *slog.Logger
	// err collects the invalid options; NewDiscovery fails with it.
	err error
}

func buildOptions(opts []Option) options {
	o := options{namespace: defaultNamespace, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("kubernetes: "+format, args...))
}

// Option configures a Discovery. An invalid option makes NewDiscovery fail
// with an error naming it.
type Option func(*options)

// WithNamespace sets the namespace of services named without one
// ("name" rather than "name.namespace"). The default is "default". A value
// that is not a valid namespace name (an RFC 1123 label) is an error.
func WithNamespace(ns string) Option {
	return func(o *options) {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			o.invalid("WithNamespace(%q): %v", ns, errs)
			return
		}
		o.namespace = ns
	}
}

// WithPort selects, in each EndpointSlice, the port named name: an
// instance's address is the endpoint's address with that port. The
// default (no WithPort) is a slice's only port; the endpoints of a slice
// with several ports, or of one without the named port, are skipped,
// logged and counted (Stats.SkippedEndpoints). An empty name or one that
// is not a valid port name (at most 15 characters of a-z, 0-9 and '-') is
// an error.
func WithPort(name string) Option {
	return func(o *options) {
		if errs := validation.IsValidPortName(name); len(errs) > 0 {
			o.invalid("WithPort(%q): %v", name, errs)
			return
		}
		o.port = name
	}
}

// WithVersionLabel makes an instance's Version the value of the label key
// on its EndpointSlice (slices carry their Service's labels, or those a
// controller that manages them sets). The default is no version. An empty
// or invalid label key is an error.
func WithVersionLabel(key string) Option {
	return func(o *options) {
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			o.invalid("WithVersionLabel(%q): %v", key, errs)
			return
		}
		o.versionLabel = key
	}
}

// WithLogger sets the logger for skipped endpoints and list or watch
// errors. The default is slog.Default(). A nil logger is an error.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.invalid("WithLogger: nil logger")
			return
		}
		o.logger = l
	}
}
