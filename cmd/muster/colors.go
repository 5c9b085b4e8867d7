package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

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

// canaries reads the canary settings of services, by service name (with
// service "", of every service). A setting that does not decode is left
// out, as clients read it as none. A user whose role does not cover the
// canary keys (one limited to its services' instances) is not refused:
// canaries returns no settings and notes it on stderr. parent is the
// command's context, ctx the same with the --timeout deadline.
func (s *session) canaries(parent, ctx context.Context, service string, stderr io.Writer) (map[string]*registry.Canary, error) {
	key := registry.CanaryKey(s.g.prefix, service)
	var opts []clientv3.OpOption
	if service == "" {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := s.cli.Get(ctx, key, opts...)
	if errors.Is(err, rpctypes.ErrPermissionDenied) {
		_, err = fmt.Fprintf(stderr, "canary: not shown: this user may not read %s\n", key)
		return nil, err
	}
	if err != nil {
		return nil, s.g.etcdError(parent, "read the canary settings", err)
	}
	out := map[string]*registry.Canary{}
	base := registry.CanaryKey(s.g.prefix, "")
	for _, kv := range resp.Kvs {
		c, err := registry.UnmarshalCanary(kv.Value)
		if err != nil {
			continue
		}
		out[strings.TrimPrefix(string(kv.Key), base)] = &c
	}
	return out, nil
}
