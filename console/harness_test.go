package console_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// waitTimeout bounds every wait of these tests that has no tighter bound.
const waitTimeout = 30 * time.Second

// adminToken is the admin token of the consoles in admin mode.
const adminToken = "test-admin-token-0123456789"

// screenshotDirEnv names the directory where the tests also save their
// screenshots (besides t.TempDir()).
const screenshotDirEnv = "MUSTER_CONSOLE_SCREENSHOTS"

// chromiumPath finds Debian's chromium (or another Chrome). Without one the
// test fails when CI=true and is skipped otherwise.
func chromiumPath(t *testing.T) string {
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

// logBuffer collects a console's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// fixture is a registry in a real etcd, a console on it served over HTTP,
// and a registrar to add instances.
type fixture struct {
	t       *testing.T
	cluster *etcdtest.Cluster
	cli     *clientv3.Client
	reg     *etcd.Registrar
	url     string // the console's base URL, ending in /ui/
	log     *logBuffer
}

func newFixture(t *testing.T, opts ...console.Option) *fixture {
	t.Helper()
	c := etcdtest.Start(t)
	cli := c.Client(t)
	reg, err := etcd.NewRegistrar(c.Client(t), etcd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("NewRegistrar: %v", err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	logs := &logBuffer{}
	opts = append([]console.Option{console.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		console.WithRelistInterval(200 * time.Millisecond)}, opts...)
	srv, err := console.New(cli, opts...)
	if err != nil {
		t.Fatalf("console.New: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", srv)
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		_ = srv.Close()
		hs.Close()
	})
	return &fixture{t: t, cluster: c, cli: cli, reg: reg, url: hs.URL + "/ui/", log: logs}
}

func (f *fixture) register(in registry.Instance) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := f.reg.Register(ctx, in); err != nil {
		f.t.Fatalf("Register %s/%s: %v", in.Name, in.ID, err)
	}
}

// override reads the override value of one instance from etcd; "" if none.
func (f *fixture) override(service, id string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := f.cli.Get(ctx, registry.OverrideKey(registry.DefaultPrefix, service, id))
	if err != nil {
		f.t.Fatalf("read override of %s/%s: %v", service, id, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// browser is one headless Chromium tab.
type browser struct {
	t       *testing.T
	ctx     context.Context
	dialogs chan string // messages of the JavaScript dialogs the page opened
}

// newBrowser starts headless Chromium with one tab, stopped at the end of
// the test.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
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
	// The first run starts the browser, which lives as long as ctx: it
	// must have no deadline. Chromium starts or fails on its own.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium %s: %v", path, err)
	}
	b := &browser{t: t, ctx: ctx, dialogs: make(chan string, 8)}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			select {
			case b.dialogs <- ev.Message:
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

// do runs actions, failing the test with what if they do not complete
// within d.
func (b *browser) do(d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.screenshot("failed")
		if errors.Is(err, context.DeadlineExceeded) {
			b.t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitJS is an action that waits until the JavaScript expression is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(0))
}

// eval evaluates a JavaScript expression, awaiting it if it is a
// promise.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the page as name.png in the test's temporary directory
// and, if MUSTER_CONSOLE_SCREENSHOTS is set, in that directory.
func (b *browser) screenshot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, waitTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	dirs := []string{b.t.TempDir()}
	if d := os.Getenv(screenshotDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, b.t.Name()+"-"+name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Logf("screenshot %s: %v", p, err)
			continue
		}
		b.t.Logf("screenshot: %s", p)
	}
}

// text returns the text content of the element sel selects.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return s
}
