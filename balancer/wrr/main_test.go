package wrr

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/balancertest"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.LeakOptions()...) }

// capture builds muster_wrr and records the balancers it builds.
var capture = balancertest.NewCapture(Name)

func built(t *testing.T) *wrrBalancer {
	t.Helper()
	b, ok := capture.Balancer().(*wrrBalancer)
	if !ok {
		t.Fatalf("captured balancer is %T, want *wrrBalancer", capture.Balancer())
	}
	return b
}
