package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/registry/etcd"
)

// The etcd client's errors reach the slog logger at error level, its
// warnings about identity at warn level and the others at debug level,
// with their fields; below warn nothing; a message with the
// same error three times, then held back, the next line let through saying
// how many; a cancelled request (the process's own shutdown) not at all.
func TestClientLogger(t *testing.T) {
	var buf lockedBuffer
	lg := etcd.ClientLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))).
		With(zap.String("target", "etcd-endpoints://x"))
	lg.Info("an info line")
	lg.Debug("a debug line")
	refused := errors.New(`etcd at 127.0.0.1:2379 refused the token of user "svc"`)
	for range 10 {
		lg.Warn("retrying of unary invoker failed", zap.Error(refused))
	}
	lg.Warn("retrying of unary invoker failed", zap.Error(errors.New("rpc error: code = Unavailable desc = connection refused")))
	lg.Warn("retrying of unary invoker failed", zap.Error(context.Canceled))
	lg.Error("streamer failed to create ClientStream", zap.Error(errors.New("boom")))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines; want 5 (3 of the refusal, 1 unavailable, 1 error):\n%s", len(lines), buf.String())
	}
	for _, l := range lines[:3] {
		if !strings.Contains(l, `level=WARN msg="etcd client: retrying of unary invoker failed"`) ||
			!strings.Contains(l, `refused the token of user \"svc\"`) || !strings.Contains(l, "target=etcd-endpoints://x") {
			t.Errorf("line %q: want the warning with its error and the logger's fields", l)
		}
	}
	if !strings.Contains(lines[3], `level=DEBUG msg="etcd client: retrying of unary invoker failed"`) ||
		!strings.Contains(lines[3], "connection refused") || strings.Contains(lines[3], "held=") {
		t.Errorf("line %q: want the other error, not about identity, at debug level on its own", lines[3])
	}
	if !strings.Contains(lines[4], `level=ERROR msg="etcd client: streamer failed to create ClientStream"`) {
		t.Errorf("line %q: want the error at error level", lines[4])
	}
	if etcd.ClientLogger(nil).Core().Enabled(zap.ErrorLevel) {
		t.Error("ClientLogger(nil) logs; want a no-op logger")
	}
}

// TestIdentityRefused checks the one classification of etcd refusing a
// client's identity, which registrars and health reports share.
func TestIdentityRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("etcd: grant lease: %w", rpctypes.ErrPermissionDenied), true},
		{rpctypes.ErrAuthFailed, true},
		{rpctypes.ErrInvalidAuthToken, true},
		{rpctypes.ErrAuthNotEnabled, true},
		{status.Error(codes.Unauthenticated, "no token"), true},
		{status.Error(codes.PermissionDenied, "denied"), true},
		{rpctypes.ErrNoSpace, false},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := etcd.IdentityRefused(tc.err); got != tc.want {
			t.Errorf("IdentityRefused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
