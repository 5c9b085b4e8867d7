package browsertest_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/browsertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBrowserLoadsAPageAndSeesDialogs(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><p id="p">hello</p>`))
	}))
	defer hs.Close()
	b := browsertest.Start(t)
	b.Do(browsertest.Timeout, "load the page", chromedp.Navigate(hs.URL), browsertest.WaitJS(`document.querySelector('#p') !== null`))
	if got := b.Text("#p"); got != "hello" {
		t.Errorf("text = %q, want hello", got)
	}
	if got := browsertest.Eval[int](b, `Promise.resolve(6 * 7)`); got != 42 {
		t.Errorf("Eval = %d, want 42", got)
	}
	browsertest.Eval[bool](b, `(setTimeout(() => alert('hi'), 0), true)`)
	select {
	case msg := <-b.Dialogs:
		if msg != "hi" {
			t.Errorf("dialog %q, want hi", msg)
		}
	case <-time.After(browsertest.Timeout):
		t.Fatalf("no dialog within %v", browsertest.Timeout)
	}
}
