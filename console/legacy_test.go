package console_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/registry/legacy"
)

// sourceCellIs is a JavaScript expression: the source cell of instance
// id's row reads text.
func sourceCellIs(id, text string) string {
	return fmt.Sprintf(`(() => { const r = %s; return r !== null && r.querySelector('td.source') !== null &&
		r.querySelector('td.source').textContent === %q; })()`, rowJS(id), text)
}

// With a legacy source, the console merges it as clients do: the services
// page lists a service found only there and says where each service's
// instances come from; the service page shows each instance once per
// address with its source (Muster's winning), filters by source, and
// offers actions on Muster's instances only.
func TestConsoleShowsLegacySources(t *testing.T) {
	gz, err := legacy.NewGoZero(legacy.WithName("payments", "payments.rpc"), legacy.WithName("orders", "orders.rpc"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, console.WithAdminToken(adminToken), console.WithLegacy("go-zero", gz, "payments", "orders"))
	f.register(instance("payments", 9001, "eu-1a", "v1", map[string]string{"tier": "gold"}))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for key, addr := range map[string]string{
		"payments.rpc/7": "10.0.0.1:9001", // the Muster instance, still in go-zero's layout
		"payments.rpc/8": "10.0.0.2:9000",
		"orders.rpc/9":   "10.0.0.3:9000",
	} {
		if _, err := f.cli.Put(ctx, key, addr); err != nil {
			t.Fatal(err)
		}
	}
	b := browsertest.Start(t)
	b.Do(browsertest.Timeout, "the services page lists orders from go-zero and payments from both",
		chromedp.Navigate(f.url),
		browsertest.WaitJS(`(() => {
			const p = document.querySelector('#services tr[data-service="payments"]');
			const o = document.querySelector('#services tr[data-service="orders"]');
			return p && o && p.querySelector('td.count').textContent === '2' && p.querySelector('td.sources').textContent === 'go-zero, muster' &&
				o.querySelector('td.count').textContent === '1' && o.querySelector('td.sources').textContent === 'go-zero' &&
				!document.querySelector('#services th.sources-col').hidden; })()`))
	openService(t, b, f, "payments", rowJS("8")+` !== null`)
	login(t, b)
	b.Do(browsertest.Timeout, "each instance once, with its source, the shared address as Muster's",
		browsertest.WaitJS(sourceCellIs("10.0.0.1:9001", "muster")),
		browsertest.WaitJS(sourceCellIs("8", "go-zero")),
		browsertest.WaitJS(`document.querySelectorAll('#instances tbody tr').length === 2 && `+rowJS("7")+` === null`),
		browsertest.WaitJS(`!document.querySelector('#instances th.source-col').hidden`))
	b.Do(browsertest.Timeout, "the source is a column, not a metadata tag",
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.querySelector('td.metadata').textContent === 'tier=gold'`))
	b.Do(browsertest.Timeout, "actions for Muster's instance only",
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.querySelector('td.actions button.drain') !== null`),
		browsertest.WaitJS(rowJS("8")+`.querySelector('td.actions button') === null`))
	b.Do(browsertest.Timeout, "the source filter keeps go-zero's instance",
		setField("#f-source", "go-zero", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '1' && `+rowJS("8")+` !== null`))
	b.Screenshot("service-legacy")
}
