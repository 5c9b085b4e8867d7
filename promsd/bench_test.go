package promsd_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// discard is a ResponseWriter that counts and drops the body, so that the
// benchmark measures the answer, not a network.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }

// BenchmarkServeTenThousand measures one answer for 10,000 instances in a
// Discovery's cache: the Handler's ServeHTTP, and the floor, encoding the
// same target groups with encoding/json on each request.
func BenchmarkServeTenThousand(b *testing.B) {
	const n = 10000
	e := newEnv(b)
	putInstances(b, e.c.Client(b), "big", n)
	waitStats(b, e.h, n)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	w := &discard{h: http.Header{}}
	e.h.ServeHTTP(w, req)
	body := w.n

	b.Run("handler", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w.n = 0
			e.h.ServeHTTP(w, req)
		}
		b.ReportMetric(float64(body), "bytes/answer")
	})
	b.Run("encoding_json", func(b *testing.B) {
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		var groups []group
		if err := json.Unmarshal(rec.Body.Bytes(), &groups); err != nil || len(groups) != n {
			b.Fatalf("answer: %d groups, %v", len(groups), err)
		}
		b.ReportAllocs()
		for b.Loop() {
			out, err := json.Marshal(groups)
			if err != nil {
				b.Fatal(err)
			}
			w.n = 0
			_, _ = w.Write(out)
		}
	})
}
