package gozero_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

// TestMain checks for leaked goroutines, except go-zero's process-wide
// ones (started by its packages' init) and those of its etcd
// clients: go-zero keeps one client per etcd cluster for the whole process
// (core/discov/internal's registry) and offers no way to close it, so its
// goroutines (and those of the gRPC connection under it, reconnecting to
// the test's stopped etcd) outlive the tests by design. The goroutines of
// Muster's own code are checked without exception by the main module's
// tests.
func TestMain(m *testing.M) {
	if spec := os.Getenv(zrpcChildEnv); spec != "" {
		os.Exit(runZRPCChild(spec))
	}
	etcdtest.RunMemberIfChild()
	opts := etcdtest.LeakOptions()
	for _, f := range []string{
		"github.com/zeromicro/go-zero/core/proc.init.1.func1",
		"github.com/zeromicro/go-zero/core/stat.init.1.func1",
		// A publisher cut off etcd retries its registration once a second
		// and sees its Stop only at its next tick.
		"github.com/zeromicro/go-zero/core/discov.(*Publisher).doKeepAlive",
		"go.etcd.io/etcd/client/v3.(*Client).autoSync",
		"go.etcd.io/etcd/client/v3.(*lessor).deadlineLoop",
		"go.etcd.io/etcd/client/v3.(*lessor).keepAliveCtxCloser",
		// go-zero's watches on its process-wide client: still open when
		// the check runs if its client has not yet seen the test's etcd
		// stop.
		"go.etcd.io/etcd/client/v3.(*watchGRPCStream).run",
		"go.etcd.io/etcd/client/v3.(*watchGRPCStream).serveSubstream",
		"google.golang.org/grpc.newClientStreamWithParams.func4",
		"go.etcd.io/etcd/client/v3.(*watchGRPCStream).waitCancelSubstreams.func1",
		"google.golang.org/grpc.(*ClientConn).WaitForStateChange",
		"google.golang.org/grpc.(*addrConn).resetTransportAndUnlock",
		"google.golang.org/grpc.(*pickerWrapper).pick",
		"google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run",
		"context.(*cancelCtx).propagateCancel.func2",
		"sync.runtime_SemacquireWaitGroup",
	} {
		opts = append(opts, goleak.IgnoreTopFunction(f))
	}
	goleak.VerifyTestMain(m, opts...)
}
