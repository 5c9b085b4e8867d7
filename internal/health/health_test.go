package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Cause classes etcd's errors, wrapped or not, into its fixed set.
func TestCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&etcd.ConnectionError{Err: context.DeadlineExceeded, Cause: "connection refused"}, CauseUnavailable},
		{status.Error(codes.Unavailable, "no leader"), CauseUnavailable},
		{fmt.Errorf("etcd: get: %w", syscall.ECONNRESET), CauseUnavailable},
		{fmt.Errorf("etcd: get: %w", context.DeadlineExceeded), CauseTimeout},
		{status.Error(codes.DeadlineExceeded, "slow"), CauseTimeout},
		{fmt.Errorf("etcd: put: %w", rpctypes.ErrPermissionDenied), CauseAuth},
		{rpctypes.ErrAuthFailed, CauseAuth},
		{rpctypes.ErrNoSpace, CauseAlarm},
		{AlarmError(errors.New("etcd alarm NOSPACE")), CauseAlarm},
		{errors.New("etcd: no response on the watch"), CauseOther},
	} {
		if got := Cause(c.err); got != c.want {
			t.Errorf("Cause(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// /readyz is 503 until the state has nothing to wait for, then 200 for
// good, even when the state waits again; the body says what it waits for
// and what is stale.
func TestReadyOnceLoaded(t *testing.T) {
	st := State{Waiting: "the first read of a", Services: []Service{{Name: "a"}}}
	c := New(nil, func() State { return st })
	mux := http.NewServeMux()
	c.Register(mux)
	get := func(path string) (int, Report) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var r Report
		if path == "/readyz" {
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
				t.Fatalf("%s: %q: %v", path, rec.Body, err)
			}
		}
		return rec.Code, r
	}
	if code, r := get("/readyz"); code != http.StatusServiceUnavailable || r.Ready || r.Waiting != st.Waiting {
		t.Fatalf("/readyz before the load = %d %+v", code, r)
	}
	st = State{Services: []Service{{Name: "a", Loaded: true, Instances: 2}}}
	if code, r := get("/readyz"); code != http.StatusOK || !r.Ready || r.Waiting != "" {
		t.Fatalf("/readyz once loaded = %d %+v", code, r)
	}
	since := time.Now()
	st = State{Waiting: "the first read of b", StaleSince: since, Err: rpctypes.ErrNoSpace,
		Services: []Service{{Name: "a", Loaded: true, Instances: 2, StaleSince: since, Error: "x", Cause: CauseOther}, {Name: "b"}}}
	code, r := get("/readyz")
	if code != http.StatusOK || !r.Ready || r.Waiting != "" || r.Cause != CauseAlarm || !r.StaleSince.Equal(since) || len(r.Services) != 2 {
		t.Fatalf("/readyz stale, a service not loaded = %d %+v; want 200, stale, both services", code, r)
	}
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Fatalf("/livez = %d", code)
	}
}

// Following waits for each wanted service to be loaded and carries each
// service's staleness and its cause.
func TestFollowing(t *testing.T) {
	since := time.Now()
	st := registry.DiscoveryStats{PerService: []registry.ServiceStats{
		{Name: "a", Instances: 1, Loaded: true, StaleSince: since, Err: status.Error(codes.Unavailable, "down")},
		{Name: "b"},
	}}
	s := Following(st, []string{"a", "b", "c"})
	if s.Waiting != "the first read of b, c" {
		t.Errorf("Waiting = %q", s.Waiting)
	}
	if a := s.Services[0]; a.Cause != CauseUnavailable || !a.StaleSince.Equal(since) || a.Instances != 1 {
		t.Errorf("a = %+v", a)
	}
	if s := Following(st, []string{"a"}); s.Waiting != "" {
		t.Errorf("Waiting for a loaded service: %q", s.Waiting)
	}
}
