package promtest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/promtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServerReadsHTTPServiceDiscovery(t *testing.T) {
	sd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"targets":["127.0.0.1:1"],"labels":{"__meta_x":"y"}}]`)
	}))
	defer sd.Close()
	s := promtest.Start(t, promtest.HTTPSDJob("sd", sd.URL, ""))
	s.WaitTargets(t, 30*time.Second, "listing the target", func(ts promtest.Targets) bool {
		return len(ts.Active) == 1 && ts.Active[0].DiscoveredLabels["__meta_x"] == "y"
	})
}
