package health

import (
	"context"
	"errors"
	"syscall"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/registry/etcd"
)

// The causes of an etcd failure, as Cause classes them: the values of
// /readyz's "cause" and of the "cause" label of muster register's
// muster_register_etcd_failures_total.
const (
	// CauseUnavailable: no connection to etcd (refused, reset, no
	// member reachable, no connection within the request's deadline).
	CauseUnavailable = "unavailable"
	// CauseTimeout: etcd was connected but did not answer in time.
	CauseTimeout = "timeout"
	// CauseAuth: etcd refused the client's identity (password or token
	// refused, permission denied).
	CauseAuth = "auth"
	// CauseAlarm: etcd refuses writes under an alarm (NOSPACE, CORRUPT).
	CauseAlarm = "alarm"
	// CauseOther: any other error, such as a watch that went silent.
	CauseOther = "other"
)

// Causes returns every cause Cause returns, in a fixed order.
func Causes() []string {
	return []string{CauseUnavailable, CauseTimeout, CauseAuth, CauseAlarm, CauseOther}
}

// Cause classes an error from etcd into one of Causes; "" for nil.
func Cause(err error) string {
	var ce *etcd.ConnectionError
	switch {
	case err == nil:
		return ""
	case etcd.IdentityRefused(err):
		return CauseAuth
	case errors.Is(err, rpctypes.ErrNoSpace), errors.Is(err, rpctypes.ErrCorrupt), errors.Is(err, errAlarm):
		return CauseAlarm
	case errors.As(err, &ce), status.Code(err) == codes.Unavailable,
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return CauseUnavailable
	case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
		return CauseTimeout
	}
	return CauseOther
}

// errAlarm marks an error as an alarm of etcd (AlarmError).
var errAlarm = errors.New("etcd alarm")

// AlarmError returns err marked so that Cause classes it as CauseAlarm.
func AlarmError(err error) error {
	if err == nil {
		return nil
	}
	return &alarmError{err}
}

type alarmError struct{ err error }

func (e *alarmError) Error() string   { return e.err.Error() }
func (e *alarmError) Unwrap() []error { return []error{e.err, errAlarm} }
