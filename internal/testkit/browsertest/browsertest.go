// Package browsertest drives a real headless Chromium (Debian's chromium
// package) with chromedp for tests of web pages.
//
// Start finds the browser on PATH; without one the test fails when the
// environment variable CI is "true" and is skipped otherwise, so that CI
// never passes without running the browser tests. Each Browser is one
// browser process with one tab, stopped at the end of the test. Waits are
// bounded and their failures say what was awaited; a failed wait saves a
// screenshot.
package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Timeout bounds every wait that is given no tighter bound.
const Timeout = 30 * time.Second

// ScreenshotDirEnv names the environment variable giving a directory where
// screenshots are saved too (besides the test's temporary directory).
const ScreenshotDirEnv = "MUSTER_SCREENSHOTS"

// Browser is one headless Chromium tab.
type Browser struct {
	t   testing.TB
	ctx context.Context
	// Dialogs receives the messages of the JavaScript dialogs the page
	// opens (each is dismissed).
	Dialogs chan string
}

// ChromiumPath finds Chromium on PATH. Without one it fails the test when
// CI=true and skips it otherwise.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: install it (apt-get install -y --no-install-recommends chromium) to run the browser tests"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Start starts headless Chromium with one tab, stopped at the end of the
// test. The browser makes no connection of its own (no updates, no
// background networking).
func Start(t testing.TB) *Browser {
	t.Helper()
	path := ChromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	// The first run starts the browser, which lives as long as the
	// context of that run: it must have no deadline, so it is bounded
	// from outside.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case err := <-started:
		if err != nil {
			cancelTab()
			cancelAlloc()
			t.Fatalf("start chromium %s: %v", path, err)
		}
	case <-timer.C:
		cancelTab()
		cancelAlloc()
		<-started
		t.Fatalf("chromium %s did not start within %v", path, Timeout)
	}
	b := &Browser{t: t, ctx: ctx, Dialogs: make(chan string, 8)}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			select {
			case b.Dialogs <- ev.Message:
			default:
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
	})
	return b
}

// Do runs actions, failing the test with what if they do not complete
// within d.
func (b *Browser) Do(d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.Screenshot("failed")
		if errors.Is(err, context.DeadlineExceeded) {
			b.t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		b.t.Fatalf("%s: %v", what, err)
	}
}

// WaitJS is an action that waits until the JavaScript expression is true
// (polled every 20ms; the bound is the one given to Do).
func WaitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(0))
}

// Eval evaluates a JavaScript expression, awaiting it if it is a promise.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// Text returns the text content of the element sel selects, waiting
// (up to Timeout) until one exists. The element is found and read in one
// evaluation in the page, so a re-render that replaces it between the two
// (the pages update live) cannot fail the read.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	q, err := json.Marshal(sel)
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	found := "document.querySelector(" + string(q) + ") !== null"
	read := "(() => { const e = document.querySelector(" + string(q) + "); return e === null ? null : e.textContent; })()"
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	for {
		err := chromedp.Do(ctx, WaitJS(found))
		var s *string
		if err == nil {
			s, err = chromedp.Run(ctx, chromedp.Evaluate[*string](read))
		}
		if err != nil {
			b.Screenshot("failed")
			b.t.Fatalf("read %s: %v", sel, err)
		}
		if s != nil {
			return *s
		}
		// Removed between the wait and the read: wait for it again.
	}
}

// Screenshot saves the page as <test name>-name.png in the test's
// temporary directory and, if MUSTER_SCREENSHOTS is set, in that
// directory. Failures are logged, not fatal.
func (b *Browser) Screenshot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	dirs := []string{b.t.TempDir()}
	if d := os.Getenv(ScreenshotDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	file := strings.ReplaceAll(b.t.Name(), "/", "_") + "-" + name + ".png"
	for _, dir := range dirs {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Logf("screenshot %s: %v", p, err)
			continue
		}
		b.t.Logf("screenshot: %s", p)
	}
}
