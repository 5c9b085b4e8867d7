package console_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// The service page shows each instance's color, filters by color, and
// follows the service's canary setting without reload.
func TestConsoleServicePageShowsColorsAndCanary(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	f.register(instance("payments", 9002, "eu-1a", "v2", map[string]string{"color": "blue"}))
	// A color is rendered as text, never as markup.
	f.register(instance("payments", 9003, "eu-1a", "v2", map[string]string{"color": "<b>x</b>"}))
	b := browsertest.Start(t)
	b.Do(browsertest.Timeout, "the services page lists the colors of payments",
		chromedp.Navigate(f.url),
		browsertest.WaitJS(`(() => { const r = document.querySelector('#services tr[data-service="payments"] td.colors');
			return r && r.textContent === '<b>x</b>, blue'; })()`))
	openService(t, b, f, "payments", rowJS("10.0.0.1:9003")+` !== null`)
	// Wait for the cells rather than read them once: the canary's first
	// read may render the table again.
	b.Do(browsertest.Timeout, "the color cells show each color as text, the base's empty",
		browsertest.WaitJS(colorCellIs("10.0.0.1:9002", "blue")),
		browsertest.WaitJS(colorCellIs("10.0.0.1:9001", "")),
		browsertest.WaitJS(colorCellIs("10.0.0.1:9003", "<b>x</b>")),
		browsertest.WaitJS(rowJS("10.0.0.1:9003")+`.querySelector('td.color b') === null`))
	b.Do(browsertest.Timeout, "no source column without legacy sources",
		browsertest.WaitJS(`document.querySelector('#instances th.source-col').hidden && `+rowJS("10.0.0.1:9001")+`.querySelector('td.source') === null`))
	b.Do(browsertest.Timeout, "the color filter keeps the blue instance",
		setField("#f-color", "blue", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '1' && `+rowJS("10.0.0.1:9002")+` !== null`))
	b.Do(browsertest.Timeout, "the base filter keeps the uncolored instance",
		setField("#f-color", "-", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '1' && `+rowJS("10.0.0.1:9001")+` !== null`))
	b.Do(browsertest.Timeout, "no canary shown", browsertest.WaitJS(`document.querySelector('#canary').hidden`))

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := etcd.SetCanary(ctx, f.cli, "payments", registry.Canary{Color: "blue", Percent: 5}); err != nil {
		t.Fatal(err)
	}
	b.Do(browsertest.Timeout, "the canary shows without reload",
		browsertest.WaitJS(`(() => { const p = document.querySelector('#canary');
			return !p.hidden && p.dataset.color === 'blue' && p.dataset.percent === '5'; })()`))
	b.Do(browsertest.Timeout, "the canary line says what it does",
		browsertest.WaitJS(`document.querySelector('#canary').textContent.includes('5% of uncolored calls go to blue')`))
	b.Screenshot("service-colors")
	if err := etcd.ClearCanary(ctx, f.cli, "payments"); err != nil {
		t.Fatal(err)
	}
	b.Do(browsertest.Timeout, "the canary goes without reload", browsertest.WaitJS(`document.querySelector('#canary').hidden`))
}

// colorCellIs is a JavaScript expression: the color cell of instance id's
// row reads text.
func colorCellIs(id, text string) string {
	return fmt.Sprintf(`(() => { const r = %s; return r !== null && r.querySelector('td.color').textContent === %q; })()`, rowJS(id), text)
}

// The service page shows the service's call policy (muster policy) and
// follows it without reload.
func TestConsoleServicePageShowsThePolicy(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", rowJS("10.0.0.1:9001")+` !== null`)
	b.Do(browsertest.Timeout, "no policy shown", browsertest.WaitJS(`document.querySelector('#policy').hidden`))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := etcd.SetPolicy(ctx, f.cli, "payments", registry.Policy{Timeout: 800 * time.Millisecond, MaxConcurrent: 5}); err != nil {
		t.Fatal(err)
	}
	b.Do(browsertest.Timeout, "the policy shows without reload",
		browsertest.WaitJS(`(() => { const p = document.querySelector('#policy');
			return !p.hidden && p.textContent === 'Call policy: timeout 800ms, maxConcurrent 5 (muster policy payments)'; })()`))
	if err := etcd.ClearPolicy(ctx, f.cli, "payments"); err != nil {
		t.Fatal(err)
	}
	b.Do(browsertest.Timeout, "the policy goes without reload", browsertest.WaitJS(`document.querySelector('#policy').hidden`))
}
