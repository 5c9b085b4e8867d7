package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// errInterrupted is returned by a command stopped by SIGINT or SIGTERM
// before it finished.
var errInterrupted = errors.New("interrupted")

// session is one command's connection to the registry: an etcd client and
// a Discovery on it, configured from the persistent flags.
type session struct {
	g   *globalOptions
	cli *clientv3.Client
	d   *etcd.Discovery
}

// connect creates the session. It does not contact etcd. The Discovery
// logs only errors (such as skipped bad values) on stderr; opts are added
// to the ones taken from the flags.
func (g *globalOptions) connect(stderr io.Writer, opts ...etcd.Option) (*session, error) {
	cfg := etcd.ClientConfig(g.endpoints...)
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(g.endpoints, ","), err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	all := append([]etcd.Option{
		etcd.WithPrefix(g.prefix),
		etcd.WithRequestTimeout(g.timeout),
		etcd.WithLogger(log),
	}, opts...)
	d, err := etcd.NewDiscovery(cli, all...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &session{g: g, cli: cli, d: d}, nil
}

// Close closes the Discovery, then the client.
func (s *session) Close() {
	_ = s.d.Close()
	_ = s.cli.Close()
}

// unreachableError says that etcd did not answer.
type unreachableError struct {
	endpoints []string
	err       error
	hint      bool // suggest muster serve
}

func (e *unreachableError) Error() string {
	msg := fmt.Sprintf("cannot reach etcd at %s: %v", strings.Join(e.endpoints, ","), e.err)
	if e.hint {
		msg += " (is \"muster serve\" running?)"
	}
	return msg
}

func (e *unreachableError) Unwrap() error { return e.err }

// etcdError turns the error of a request that ran under a context with the
// --timeout deadline, child of parent, into the error the command reports.
func (g *globalOptions) etcdError(parent context.Context, what string, err error) error {
	if parent.Err() != nil {
		return errInterrupted
	}
	if !isTimeout(err) && status.Code(err) != codes.Unavailable {
		return fmt.Errorf("%s: %w", what, err)
	}
	if isTimeout(err) {
		err = fmt.Errorf("no answer within %v", g.timeout)
	}
	return &unreachableError{
		endpoints: g.endpoints,
		err:       err,
		hint:      slices.Equal(g.endpoints, []string{defaultEndpoint}),
	}
}

// waitLoaded waits until w's snapshot is loaded or ctx ends. In the latter
// case the error is the snapshot's last error if that is an answer from
// etcd (such as a permission error), else ctx's error: a Get that timed
// out or was slow says no more than that etcd did not answer.
func waitLoaded(ctx context.Context, w registry.Watcher) (registry.Snapshot, error) {
	for {
		s := w.Snapshot()
		if s.Loaded {
			return s, nil
		}
		select {
		case _, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return s, err
				}
				return s, registry.ErrClosed
			}
		case <-ctx.Done():
			s = w.Snapshot()
			if s.Loaded {
				return s, nil
			}
			var answer rpctypes.EtcdError
			if errors.As(s.Err, &answer) {
				return s, s.Err
			}
			return s, ctx.Err()
		}
	}
}

// isTimeout reports whether err is a deadline expiring, as a context error
// or as the gRPC status the etcd client may turn it into.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}
