package clusters_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild()
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}
