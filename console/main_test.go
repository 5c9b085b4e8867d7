package console_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild() // the benchmarks run etcd in a child process
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}
