package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-zookeeper/zk"
)

// zkLogger routes the client library's messages to slog at debug level:
// it logs every failed connection attempt, which at a higher level would
// flood the log during an outage the backend reports itself.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...))
}

// conn is one ZooKeeper connection (and session, re-created by the client
// library after expiry) owned by a Registrar or a Discovery.
type conn struct {
	*zk.Conn
	events <-chan zk.Event
}

// dial connects to servers; onEvent is called for every session and watch
// event, on the library's goroutine, and must not block.
func dial(servers []string, o options, onEvent func(zk.Event)) (*conn, error) {
	if len(servers) == 0 {
		return nil, errors.New("zookeeper: no servers")
	}
	for _, s := range servers {
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("zookeeper: empty server address in %q", servers)
		}
	}
	// The library detects a silent server after 2/3 of the session
	// timeout; a handshake bounded to 1/6 leaves time to try two more
	// servers (and its one-second pause after a round) before the
	// session expires.
	c, events, err := zk.Connect(servers, o.sessionTimeout,
		zk.WithDialer(handshakeDialer(o.sessionTimeout/6)),
		zk.WithLogger(zkLogger{o.logger.With("component", "zk")}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(onEvent))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: connect: %w", err)
	}
	return &conn{Conn: c, events: events}, nil
}

// close closes the connection and waits until the library's goroutines
// have ended (they close the event channel last).
func (c *conn) close() {
	c.Close()
	for range c.events {
		// Drain: the channel closes after the library's last goroutine.
	}
}

// oneShot runs f on a connection of its own to servers, bounded by the
// request timeout of opts, and closes the connection.
func oneShot(ctx context.Context, servers []string, opts []Option, f func(ctx context.Context, c *zk.Conn, o options) error) error {
	o := buildOptions(opts)
	if o.err != nil {
		return o.err
	}
	c, err := dial(servers, o, func(zk.Event) {})
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, o.requestTimeout)
	defer cancel()
	return f(ctx, c.Conn, o)
}

// call runs f (a blocking request of the library, which has no context) and
// returns its error, or ctx's error if ctx ends first; f then finishes in
// the background (the library fails it at the latest when the connection is
// lost or closed).
func call(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ensurePath creates every missing persistent node of path.
func ensurePath(c *zk.Conn, path string) error {
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		p := path[:i]
		if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper: create %s: %w", p, err)
		}
	}
	return nil
}

// retryable reports whether err is a transient failure of the connection
// or session (the request is tried again), not a refusal.
func retryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired) ||
		errors.Is(err, zk.ErrSessionMoved) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrClosing) || errors.Is(err, context.DeadlineExceeded)
}
