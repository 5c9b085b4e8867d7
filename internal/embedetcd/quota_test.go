package embedetcd_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/embedetcd"
)

// A request over MaxRequestBytes is refused as too large; one just under
// it is written.
func TestMaxRequestBytes(t *testing.T) {
	s := start(t, embedetcd.Config{Dir: t.TempDir()}, "http")
	cli := client(t, s, nil, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := cli.Put(ctx, "k", strings.Repeat("x", embedetcd.MaxRequestBytes)); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
		t.Fatalf("put of %d bytes: %v, want %v", embedetcd.MaxRequestBytes, err, rpctypes.ErrRequestTooLarge)
	}
	if _, err := cli.Put(ctx, "k", strings.Repeat("x", embedetcd.MaxRequestBytes-64)); err != nil {
		t.Fatalf("put of %d bytes: %v", embedetcd.MaxRequestBytes-64, err)
	}
}

// Filling the backend quota raises NOSPACE, which Alarms reports, also
// after a restart; freeing the space (delete, compact, defragment) and
// disarming the alarm clears it and writes go on.
func TestQuotaRaisesNoSpace(t *testing.T) {
	if _, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: t.TempDir(), QuotaBackendBytes: -1}); err == nil ||
		!strings.Contains(err.Error(), "QuotaBackendBytes -1") {
		t.Fatalf("Start with a negative quota: %v, want an error naming it", err)
	}
	cfg := embedetcd.Config{Dir: t.TempDir(), QuotaBackendBytes: 4 << 20}
	s := start(t, cfg, "http")
	if got := s.Alarms(); got != nil {
		t.Fatalf("Alarms of a new server = %v, want none", got)
	}
	cli := client(t, s, nil, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	val := strings.Repeat("x", embedetcd.MaxRequestBytes/2)
	var err error
	for i := 0; err == nil; i++ {
		if i == 100 {
			t.Fatalf("%d puts of %d bytes fit a quota of %d bytes", i, len(val), cfg.QuotaBackendBytes)
		}
		_, err = cli.Put(ctx, "junk", val)
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("put over the quota: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	if got := s.Alarms(); !slices.Equal(got, []string{"NOSPACE"}) {
		t.Fatalf("Alarms after the quota was reached = %v, want [NOSPACE]", got)
	}

	// The alarm is kept in the data directory.
	cli.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = start(t, cfg, "http")
	if got := s.Alarms(); !slices.Equal(got, []string{"NOSPACE"}) {
		t.Fatalf("Alarms after a restart = %v, want [NOSPACE]", got)
	}

	cli = client(t, s, nil, "", "")
	resp, err := cli.Delete(ctx, "junk")
	if err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, s.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	if got := s.Alarms(); got != nil {
		t.Fatalf("Alarms after the recovery = %v, want none", got)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put after the recovery: %v", err)
	}
}
