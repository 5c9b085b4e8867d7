package promsd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/musterhq/muster/registry"
)

// Defaults of the options.
const (
	defaultListInterval = 10 * time.Second
	listTimeout         = 10 * time.Second
)

// Option configures a Handler. An invalid option makes NewHandler fail with
// an error naming it.
type Option func(*options)

type options struct {
	services     []string
	listInterval time.Duration
	log          *slog.Logger
	err          error
}

func defaultOptions() options {
	return options{
		listInterval: defaultListInterval,
		log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// invalid records an invalid option.
func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("promsd: "+format, args...))
}

// WithServices makes the Handler serve exactly these services. Without it,
// the Handler serves every service the Discovery lists (it must then
// implement registry.ServiceLister). An invalid service name is an error of
// NewHandler.
func WithServices(names ...string) Option {
	return func(o *options) {
		for _, n := range names {
			if err := registry.ValidateName(n); err != nil {
				o.invalid("WithServices: %w", err)
				return
			}
		}
		o.services = append(o.services, names...)
	}
}

// WithListInterval sets how often the Handler lists the Discovery's
// services to follow new ones and forget those gone, when no WithServices
// is given. The default is 10 s; a non-positive interval is an error of
// NewHandler.
func WithListInterval(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.invalid("WithListInterval: %v is not positive", d)
			return
		}
		o.listInterval = d
	}
}

// WithLogger sets the logger; by default nothing is logged. nil is an
// error of NewHandler.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.invalid("WithLogger: nil logger")
			return
		}
		o.log = l
	}
}
