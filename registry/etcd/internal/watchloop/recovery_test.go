package watchloop

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRecoveryAttemptTimeout(t *testing.T) {
	const every, request = 2 * time.Second, 5 * time.Second
	var r recovery
	if got := r.attemptTimeout(every, request); got != request {
		t.Fatalf("not recovering: bound %v, want the request timeout %v", got, request)
	}
	r.silenced(7)
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, request, request}
	for i, w := range want {
		if got := r.attemptTimeout(every, request); got != w {
			t.Fatalf("after %d failures: bound %v, want %v", i, got, w)
		}
		r.failed()
	}
	r.unconfirmed()
	if !r.recovering || r.quickFailed != len(want)+1 {
		t.Fatalf("after an unconfirmed watch: %+v", r)
	}
	r.confirmed()
	if r != (recovery{}) {
		t.Fatalf("confirmed: %+v, want the zero recovery", r)
	}
	r.failed()
	if r.quickFailed != 0 {
		t.Fatalf("a failure while not recovering counted: %+v", r)
	}
	r.unconfirmed()
	if got := r.attemptTimeout(every, request); got != 2*time.Second {
		t.Fatalf("after an unconfirmed watch: bound %v, want 2s", got)
	}
}

func TestRecoveryHedging(t *testing.T) {
	var r recovery
	if r.hedging(3) {
		t.Fatal("hedging while not recovering")
	}
	r.unconfirmed()
	if r.hedging(1) {
		t.Fatal("hedging with one endpoint")
	}
	if !r.hedging(2) {
		t.Fatal("not hedging while recovering with two endpoints")
	}
}

func TestRecoveryLandedOnAvoided(t *testing.T) {
	var r recovery
	if r.landedOnAvoided(7, 3) {
		t.Fatal("a member avoided with none to avoid")
	}
	r.silenced(7)
	if r.landedOnAvoided(8, 3) {
		t.Fatal("another member avoided")
	}
	if r.landedOnAvoided(7, 1) {
		t.Fatal("the only endpoint avoided")
	}
	for i := range 2 {
		if !r.landedOnAvoided(7, 3) {
			t.Fatalf("landing %d on the silent member accepted", i+1)
		}
	}
	if r.landedOnAvoided(7, 3) {
		t.Fatal("the silent member still avoided after two landings")
	}
	r.silenced(9)
	if r.avoided != 0 || !r.landedOnAvoided(9, 2) {
		t.Fatalf("a new silence did not start avoiding its member: %+v", r)
	}
}

// A silent watch's error is a timeout, so that health reports class it as
// one, and says which watch and for how long.
func TestSilenceIsATimeout(t *testing.T) {
	err := error(&silenceError{key: "/muster/services/user/", quiet: 5 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v is not a context.DeadlineExceeded", err)
	}
	if want := "etcd: no response on the watch of /muster/services/user/ for 5s"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}
