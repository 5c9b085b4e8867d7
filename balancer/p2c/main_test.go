package p2c

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/balancertest"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.LeakOptions()...) }

// capture builds muster_p2c and records the balancers and pickers it
// builds, so tests can look at the balancer's per-endpoint state.
var capture = balancertest.NewCapture(Name)

// built returns the last muster_p2c balancer the capture built.
func built(t *testing.T) *p2cBalancer {
	t.Helper()
	b, ok := capture.Balancer().(*p2cBalancer)
	if !ok {
		t.Fatalf("captured balancer is %T, want *p2cBalancer", capture.Balancer())
	}
	return b
}
