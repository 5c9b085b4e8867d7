package demo

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// TestCrashLeavesWithTheLease: a crashed backend cannot revoke its lease,
// so its key goes when the lease expires, about the TTL after the crash
// (less the time since the last renewal), measured from the crash.
func TestCrashLeavesWithTheLease(t *testing.T) {
	dir := t.TempDir()
	ecfg, err := etcdConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedetcd.Start(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := startBackend(srv.Endpoint(), "b1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b.shutdown(context.Background())
	cli, err := clientv3.New(etcd.ClientConfig(srv.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gone, err := watchDeletion(ctx, cli, registry.Key(registry.DefaultPrefix, service, b.name))
	if err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	b.crash()
	t.Logf("crash() took %v", time.Since(crashed).Round(time.Millisecond))
	select {
	case at := <-gone:
		took := at.Sub(crashed)
		t.Logf("gone %v after the crash (TTL %v)", took.Round(time.Millisecond), leaseTTL)
		// Renewed every TTL/3, the lease outlives the crash by at least
		// 2/3 of the TTL; TTL/2 leaves room for late renewals on a busy
		// machine and still fails a revocation (milliseconds).
		if took < leaseTTL/2 || took > leaseTTL+time.Second {
			t.Fatalf("gone %v after the crash, want between TTL/2 = %v and TTL + 1s = %v", took, leaseTTL/2, leaseTTL+time.Second)
		}
	case <-ctx.Done():
		t.Fatal("the crashed backend's key was not deleted within 10s")
	}
}
