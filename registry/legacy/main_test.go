package legacy_test

import (
	"io"
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild()
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// quiet discards the library's logs; failures are reported by assertions.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
