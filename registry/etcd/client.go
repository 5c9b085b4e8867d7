package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ClientConfig returns an etcd client configuration tuned for a registry
// client: it reconnects within about two seconds after an outage (gRPC's
// own reconnect backoff grows to 120s, which would keep a registrar away
// from a recovered etcd for minutes), detects a dead connection within
// about 13 seconds through keepalive pings while it has streams open (etcd
// closes connections that ping without one; gRPC pings at most every 10
// seconds), discards the client's own
// zap logs (Muster logs through log/slog; set Logger to ClientLogger to
// keep its warnings), and reports why a request could
// not reach etcd (ConnectionError). With a user name and password it also
// logs in again after an etcd server older than 3.5 forgot the client's
// token (a restart, or a token unused for longer than --auth-token-ttl),
// which the etcd client alone never does against those servers
// (dropRefusedToken). Adjust the result as needed (TLS,
// credentials) and pass it to clientv3.New; append to its DialOptions
// rather than replacing them.
//
// A Registrar does not rely on that detection to keep its lease: 13 seconds
// is longer than the default TTL. It notices a member that does not answer
// a renewal within TTL/6 and renews through another member, at the latest
// TTL/2 after the last renewal (see WithTTL).
func ClientConfig(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		// etcd's server refuses pings more often than every 5s, and
		// any ping on a connection without a stream (too_many_pings),
		// so ping only while streams (keepalives, watches) are open.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		PermitWithoutStream:  false,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: grpcbackoff.Config{
					BaseDelay:  100 * time.Millisecond,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   2 * time.Second,
				},
				MinConnectTimeout: 2 * time.Second,
			}),
			grpc.WithChainUnaryInterceptor(keepConnectionError, dropRefusedToken),
		},
	}
}

// ConnectionError is the error of a request, made by a client configured
// with ClientConfig, that waited for a connection to etcd until its context
// ended. Match it with errors.As; errors.Is(err, context.DeadlineExceeded)
// (or context.Canceled) holds as well.
//
// The etcd client waits for a connection until a request's deadline and
// then reports only the context's error, "context deadline exceeded",
// although gRPC knows why it could not connect: a refused connection, or a
// TLS handshake that failed because the server's certificate is not signed
// by the configured CA or because the server requires a client
// certificate. ConnectionError keeps that reason, for example:
//
//	context deadline exceeded waiting for a connection to etcd; last connection error: transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority
type ConnectionError struct {
	// Err is the context's error: context.DeadlineExceeded or
	// context.Canceled.
	Err error
	// Cause is gRPC's description of the last failed connection attempt.
	Cause string
}

// Error returns the context's error followed by the cause.
func (e *ConnectionError) Error() string {
	return e.Err.Error() + " waiting for a connection to etcd; last connection error: " + e.Cause
}

// Unwrap returns the context's error.
func (e *ConnectionError) Unwrap() error { return e.Err }

// balancerErrorPrefix starts the message of gRPC's error for a request
// that waited for a connection until its context ended, when gRPC knows
// why connecting failed.
const balancerErrorPrefix = "latest balancer error: "

// keepConnectionError runs inside the etcd client's retry interceptor, on
// each attempt. When an attempt ends because its context did while it
// waited for a connection, it replaces gRPC's status error, which the etcd
// client would reduce to the context's bare error, by a ConnectionError.
// That error is not a gRPC status, so the retry interceptor returns it as
// it is (it retries only Unavailable errors, and the context is done
// anyway).
func keepConnectionError(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil || ctx.Err() == nil {
		return err
	}
	s, ok := status.FromError(err)
	if !ok || (s.Code() != codes.DeadlineExceeded && s.Code() != codes.Canceled) {
		return err
	}
	cause, ok := strings.CutPrefix(s.Message(), balancerErrorPrefix)
	if !ok {
		return err
	}
	return &ConnectionError{Err: ctx.Err(), Cause: cleanConnectionError(cause)}
}

// cleanConnectionError removes gRPC's wrapping from a connection error:
// `connection error: desc = "transport: ..."` becomes `transport: ...`.
func cleanConnectionError(s string) string {
	inner, ok := strings.CutPrefix(s, "connection error: desc = ")
	if !ok {
		return s
	}
	if unquoted, err := strconv.Unquote(inner); err == nil {
		return unquoted
	}
	return inner
}

// authenticateMethod is the gRPC method of etcd's login.
const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// dropRefusedToken runs inside the etcd client's retry interceptor, on
// each attempt. It makes a client with a user name and password log in
// again when an etcd server before 3.5 no longer knows its token.
//
// The etcd client sends its current token with every request, its login
// included, and when a request is refused for an invalid token it logs in
// again. etcd 3.5 and later ignore the token of a login; etcd 3.4 checks
// it like any other (etcdserver/v3_server.go, processInternalRaftRequestOnce
// at v3.4.23; 3.5 skips the check for a login there) and refuses the login
// with the same "invalid auth token". The client then logs in again from
// inside its login, with the same token, until the request's deadline:
// every request fails, and the stale token reaches etcd about every 50 ms
// for as long as the process runs. Simple tokens live in a member's memory,
// so a restart of the member forgets them, as does --auth-token-ttl of
// disuse.
//
// The only way the etcd client drops its token is a login answered "auth
// not enabled". So a login refused for its token returns a
// tokenRefusedError, which matches rpctypes.ErrAuthNotEnabled: the client
// clears the token and retries the request without one; etcd answers
// "user name is empty", upon which the client logs in without a token,
// which etcd 3.4 accepts, and retries again with the new token. A request
// costs two more round trips, once per forgotten token.
func dropRefusedToken(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != authenticateMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var p peer.Peer
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
	if err == nil || !errors.Is(rpctypes.Error(err), rpctypes.ErrInvalidAuthToken) {
		return err
	}
	e := &tokenRefusedError{}
	if r, ok := req.(*pb.AuthenticateRequest); ok {
		e.user = r.Name
	}
	if p.Addr != nil {
		e.endpoint = p.Addr.String()
	}
	return e
}

// tokenRefusedError is a login that etcd refused because of the token it
// carried. It matches rpctypes.ErrAuthNotEnabled, so that the etcd client
// clears its token (dropRefusedToken); its text is what the etcd client's
// own log shows.
type tokenRefusedError struct {
	user, endpoint string
}

func (e *tokenRefusedError) Error() string {
	return fmt.Sprintf("etcd at %s refused the token of user %q (etcdserver: invalid auth token); logging in again without it", e.endpoint, e.user)
}

// Is reports whether target is rpctypes.ErrAuthNotEnabled.
func (e *tokenRefusedError) Is(target error) bool {
	t, ok := target.(rpctypes.EtcdError)
	return ok && t == rpctypes.ErrAuthNotEnabled
}

// IdentityRefused reports whether err is etcd refusing the client's
// identity: a password or token refused, a user name missing or not
// expected (authentication not enabled), permission denied. It is the one
// classification every part of Muster uses: a Registrar's
// RegistrarStatus.Refusals, its log line after a long failure, and the
// "auth" cause of /readyz and of muster register's metrics.
func IdentityRefused(err error) bool {
	for _, e := range []error{rpctypes.ErrAuthFailed, rpctypes.ErrInvalidAuthToken, rpctypes.ErrUserEmpty,
		rpctypes.ErrPermissionDenied, rpctypes.ErrAuthOldRevision, rpctypes.ErrAuthNotEnabled} {
		if errors.Is(err, e) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}
