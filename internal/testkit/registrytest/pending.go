package registrytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// PendingRegistrar is a registrar whose Register may answer
// registry.ErrPending while its backend is coming back, and that tells when
// what it holds is written (etcd's Registrar).
type PendingRegistrar interface {
	Register(ctx context.Context, in registry.Instance) error
	WaitRegistered(ctx context.Context) error
}

// RegisterEventually registers in through reg and returns once it is
// written. Right after the backend restarts or is restored, Register may
// answer registry.ErrPending, the documented answer: the instance is
// written as soon as the backend answers, so RegisterEventually then waits
// until reg has written its whole set. It fails t on any other error, when
// Register takes over 10 s, or when the wait takes over 30 s.
func RegisterEventually(t testing.TB, reg PendingRegistrar, in registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := reg.Register(ctx, in)
	cancel()
	if errors.Is(err, registry.ErrPending) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if werr := reg.WaitRegistered(ctx); werr != nil {
			err = fmt.Errorf("%w; and not registered within 30 s: %w", err, werr)
		} else {
			err = nil
		}
		cancel()
	}
	if err != nil {
		t.Fatalf("register %s/%s: %v", in.Name, in.ID, err)
	}
}
