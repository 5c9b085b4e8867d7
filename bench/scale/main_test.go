package scale_test

import (
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild()
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// Sizes of the mass-expiry benchmark.
var (
	expiryKeys     = flag.Int("expiry.keys", 50000, "keys (each on its own lease) expiring in BenchmarkMassExpiry")
	expiryServices = flag.Int("expiry.services", 1, "services the keys of BenchmarkMassExpiry are spread over (evenly, their leases interleaved)")
	expiryChannels = flag.Int("expiry.channels", 10, "services of BenchmarkMassExpiry followed by a channel each (the first ones)")
	expiryTTL      = flag.Duration("expiry.ttl", 30*time.Second, "TTL of the leases in BenchmarkMassExpiry; it must outlast granting them, writing the keys and loading the channels")
)

// quiet discards the library's logs; the benchmarks report what they see.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
