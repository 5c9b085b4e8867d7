package kubernetes

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

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

// checked is an option that applies set, or records that the option
// named name was given an invalid value (errs says why).
func checked(name, value string, errs []string, set func(*options)) Option {
	return func(o *options) {
		if len(errs) > 0 {
			o.invalid("%s(%q): %s", name, value, strings.Join(errs, "; "))
			return
		}
		set(o)
	}
}

// Option configures a Discovery. An invalid option makes NewDiscovery fail
// with an error naming it.
type Option func(*options)

// WithNamespace sets the namespace of services named without one
// ("name" rather than "name.namespace"). The default is "default". A value
// that is not a valid namespace name (an RFC 1123 label) is an error.
func WithNamespace(ns string) Option {
	return checked("WithNamespace", ns, validation.IsDNS1123Label(ns), func(o *options) { o.namespace = ns })
}

// WithPort selects, in each EndpointSlice, the port named name: an
// instance's address is the endpoint's address with that port. The
// default (no WithPort) is a slice's only port; the endpoints of a slice
// with several ports, or of one without the named port, are skipped,
// logged and counted (Stats.SkippedEndpoints). An empty name or one that
// is not a valid port name (at most 15 characters of a-z, 0-9 and '-') is
// an error.
func WithPort(name string) Option {
	return checked("WithPort", name, validation.IsValidPortName(name), func(o *options) { o.port = name })
}

// WithVersionLabel makes an instance's Version the value of the label key
// on its EndpointSlice (slices carry their Service's labels, or those a
// controller that manages them sets). The default is no version. An empty
// or invalid label key is an error.
func WithVersionLabel(key string) Option {
	return checked("WithVersionLabel", key, validation.IsQualifiedName(key), func(o *options) { o.versionLabel = key })
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
