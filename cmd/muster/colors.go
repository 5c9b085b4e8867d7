package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
)

// colorOf is the color of in as balancers read it by default (metadata
// key color.DefaultInstanceKey); "" for the base.
func colorOf(in *registry.Instance) string {
	return in.Metadata[color.DefaultInstanceKey]
}

// describeCanary renders a canary setting as in "5% of uncolored calls to
// blue"; the color is quoted when it holds separators.
func describeCanary(c registry.Canary) string {
	return strconv.FormatFloat(c.Percent, 'f', -1, 64) + "% of uncolored calls to " + quoteIfNeeded(c.Color)
}

// canaryCell is a canary setting in a table cell: "5% blue", or "-" for
// none.
func canaryCell(c *registry.Canary) string {
	if c == nil {
		return "-"
	}
	return strconv.FormatFloat(c.Percent, 'f', -1, 64) + "% " + quoteIfNeeded(c.Color)
}

// canaries reads the canary settings of service (with service "", of
// every service in names), by service name. A setting that does not
// decode is left out, as clients read it as none. A user whose role does
// not cover the canary keys (one limited to its services' instances) is
// not refused: canaries returns no settings and notes it on stderr.
// parent is the command's context, ctx the same with the --timeout
// deadline.
func (s *session) canaries(parent, ctx context.Context, stderr io.Writer, service string, names ...string) (map[string]*registry.Canary, error) {
	if service != "" {
		names = []string{service}
	}
	out := map[string]*registry.Canary{}
	for _, name := range names {
		c, ok, err := s.admin.Canary(ctx, name)
		switch {
		case errors.Is(err, rpctypes.ErrPermissionDenied):
			_, err = fmt.Fprintf(stderr, "canary: not shown: this user may not read %s\n", registry.CanaryKey(s.g.prefix, service))
			return nil, err
		case badValue(err):
			continue
		case err != nil:
			return nil, s.fail(parent, "read the canary settings", err)
		case ok:
			out[name] = &c
		}
	}
	return out, nil
}

// badValue reports whether err is a stored value that does not decode or
// validate, rather than a failed request.
func badValue(err error) bool {
	var fe *registry.FieldError
	return errors.Is(err, registry.ErrMalformedValue) || errors.Is(err, registry.ErrUnsupportedVersion) ||
		errors.Is(err, registry.ErrInvalidInstance) || errors.As(err, &fe)
}
