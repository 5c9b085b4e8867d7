package console_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/legacy"
)

// row is the selector of the service page's row of one instance.
func row(id string) string {
	return fmt.Sprintf(`#instances tbody tr[data-id=%q]`, id)
}

// rowJS is a JavaScript expression for that row.
func rowJS(id string) string {
	return fmt.Sprintf(`document.querySelector(%q)`, row(id))
}

func instance(service string, port int, zone, version string, md map[string]string) registry.Instance {
	return registry.Instance{Name: service, Addr: fmt.Sprintf("10.0.0.1:%d", port), Zone: zone, Version: version, Metadata: md}
}

func TestConsoleServicesPageListsRegisteredService(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1.2.0", nil))
	f.register(instance("payments", 9002, "eu-1b", "v1.2.0", nil))
	f.register(instance("users", 9003, "eu-1a", "v2.0.0", nil))
	b := browsertest.Start(t)
	b.Do(browsertest.Timeout, "services page lists payments with 2 instances",
		chromedp.Navigate(f.url),
		browsertest.WaitJS(`(() => { const r = document.querySelector('#services tr[data-service="payments"]');
			return r && r.querySelector('.count').textContent === '2'; })()`),
		browsertest.WaitJS(`document.querySelector('#services tr[data-service="users"]') !== null`),
	)
	if got := b.Text(`#services tr[data-service="payments"]`); !strings.Contains(got, "eu-1a, eu-1b") || !strings.Contains(got, "v1.2.0") {
		t.Errorf("payments row = %q, want its zones and version", got)
	}
	f.register(instance("orders", 9004, "eu-1c", "v3.0.0", nil))
	b.Do(browsertest.Timeout, "a new service appears without reload",
		browsertest.WaitJS(`document.querySelector('#services tr[data-service="orders"]') !== null`))
	b.Do(browsertest.Timeout, "filter keeps users only",
		chromedp.SendKeys(chromedp.CSS("#filter"), "v2.0"),
		browsertest.WaitJS(`document.querySelectorAll('#services tbody tr').length === 1 &&
			document.querySelector('#services tr[data-service="users"]') !== null`),
	)
	b.Screenshot("services")
}

func TestConsoleServicePageShowsNewRegistrationWithinASecond(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", rowJS("10.0.0.1:9001")+` !== null`)
	f.register(registry.Instance{ID: "pay-2", Name: "payments", Addr: "10.0.0.2:9002", Zone: "eu-1b", Version: "v2"})
	start := time.Now()
	b.Do(time.Second, "the new instance appears without reload", browsertest.WaitJS(rowJS("pay-2")+` !== null`))
	t.Logf("new registration shown %v after Register returned", time.Since(start))
	if got := b.Text(row("pay-2") + " td.id"); got != "pay-2" {
		t.Errorf("ID cell = %q, want pay-2 (it differs from the address)", got)
	}
	if got := b.Text(row("10.0.0.1:9001") + " td.id"); got != "" {
		t.Errorf("ID cell = %q, want empty (the ID is the address)", got)
	}
	b.Do(browsertest.Timeout, "the timeline lists the addition",
		browsertest.WaitJS(`document.querySelector('#timeline').textContent.includes('added pay-2')`))
	b.Screenshot("service")
}

// setField sets the value of the form field sel selects and fires event
// on it, as a user's edit does.
func setField(sel, value, event string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event(%q)); })()`, sel, value, event))
}

// openService opens the page of service and waits until the JavaScript
// expression ready is true.
func openService(t *testing.T, b *browsertest.Browser, f *fixture, service, ready string) {
	t.Helper()
	b.Do(browsertest.Timeout, "open the page of "+service, chromedp.Navigate(f.url+"?name="+service), browsertest.WaitJS(ready))
}

// login logs the page in with the admin token.
func login(t *testing.T, b *browsertest.Browser) {
	t.Helper()
	b.Do(browsertest.Timeout, "log in as admin",
		chromedp.WaitVisible(chromedp.CSS("#login")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken),
		chromedp.Click(chromedp.CSS("#login button")),
		browsertest.WaitJS(`document.body.dataset.admin === 'yes'`),
	)
}

// adminPage registers 10.0.0.1:9001 and :9002 of payments, opens the
// service's page and logs it in as admin.
func adminPage(t *testing.T) (*fixture, *browsertest.Browser) {
	t.Helper()
	f := newFixture(t, console.WithAdminToken(adminToken))
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	f.register(instance("payments", 9002, "eu-1a", "v1", nil))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", rowJS("10.0.0.1:9002")+` !== null`)
	login(t, b)
	return f, b
}

func TestConsoleDrainButtonWritesOverride(t *testing.T) {
	f, b := adminPage(t)
	b.Do(browsertest.Timeout, "drain 10.0.0.1:9001 and see it draining",
		chromedp.Click(chromedp.CSS(row("10.0.0.1:9001")+" button.drain")),
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.dataset.draining === 'yes'`),
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.querySelector('.override') !== null`),
	)
	if got := f.override("payments", "10.0.0.1:9001"); !strings.Contains(got, `"weight":0`) {
		t.Errorf("override in etcd = %q, want weight 0", got)
	}
	if got := f.override("payments", "10.0.0.1:9002"); got != "" {
		t.Errorf("override of the other instance = %q, want none", got)
	}
	if got := b.Text("#result-cmd"); got != "muster drain payments 10.0.0.1:9001" {
		t.Errorf("equivalent command = %q", got)
	}
	if !strings.Contains(f.log.String(), "action=drain") || !strings.Contains(f.log.String(), "admin session") {
		t.Errorf("action not logged with who and what:\n%s", f.log.String())
	}
	// The page lists the traced write (muster history), as the journal
	// holds it.
	rec := f.history("payments")
	if len(rec) != 1 {
		t.Fatalf("journal after the drain: %+v", rec)
	}
	b.Do(browsertest.Timeout, "the drain in the operator writes",
		browsertest.WaitJS(fmt.Sprintf(`document.querySelectorAll('#history tbody tr').length === 1 && document.querySelector('#history tbody tr[data-revision="%d"]') !== null`, rec[0].Revision)),
	)
	cells := browsertest.Eval[string](b, `[...document.querySelectorAll('#history tbody tr td')].map((td) => td.textContent).join('|')`)
	if want := strings.Join([]string{rec[0].Time.Format(time.RFC3339), "admin token", "console", "drain", "10.0.0.1:9001", "-", "weight 0", fmt.Sprint(rec[0].Revision)}, "|"); cells != want {
		t.Errorf("the page's row of the drain = %q, want %q", cells, want)
	}
	b.Screenshot("drained")
	b.Do(browsertest.Timeout, "undrain it",
		chromedp.Click(chromedp.CSS(row("10.0.0.1:9001")+" button.undrain")),
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.dataset.draining === 'no'`),
	)
	if got := f.override("payments", "10.0.0.1:9001"); got != "" {
		t.Errorf("override after undrain = %q, want none", got)
	}

	b.Do(browsertest.Timeout, "set the weight of 10.0.0.1:9002 to 40",
		chromedp.SendKeys(chromedp.CSS(row("10.0.0.1:9002")+" input.weight-input"), "40"),
		chromedp.Click(chromedp.CSS(row("10.0.0.1:9002")+" button.set-weight")),
		browsertest.WaitJS(rowJS("10.0.0.1:9002")+`.querySelector('td.weight').textContent.startsWith('40')`),
	)
	if got := f.override("payments", "10.0.0.1:9002"); !strings.Contains(got, `"weight":40`) {
		t.Errorf("override in etcd = %q, want weight 40", got)
	}
	if got := b.Text("#result-cmd"); got != "muster weight payments 10.0.0.1:9002 40" {
		t.Errorf("equivalent command = %q", got)
	}

	// Without the CSRF token, the session cookie alone is refused.
	forged := browsertest.Eval[int](b, `fetch('api/action', {method: 'POST', headers: {'Content-Type': 'application/json'},
		body: JSON.stringify({action: 'drain', service: 'payments', ids: ['10.0.0.1:9001']})}).then(r => r.status)`)
	if forged != http.StatusForbidden {
		t.Errorf("POST without CSRF token: status %d, want 403", forged)
	}
}

func TestConsoleBatchDrainDrainsExactlyTheFilteredSet(t *testing.T) {
	f := newFixture(t, console.WithAdminToken(adminToken))
	canary := map[string]string{"track": "canary"}
	stable := map[string]string{"track": "stable"}
	f.register(instance("payments", 9001, "eu-1a", "v1", canary))
	f.register(instance("payments", 9002, "eu-1a", "v1", stable))
	f.register(instance("payments", 9003, "eu-1b", "v1", canary))
	f.register(instance("payments", 9004, "eu-1a", "v2", canary))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", `document.querySelectorAll('#instances tbody tr').length === 4`)
	login(t, b)
	b.Do(browsertest.Timeout, "filter zone eu-1a, version v1, track=canary",
		setField("#f-zone", "eu-1a", "change"),
		setField("#f-version", "v1", "change"),
		chromedp.SendKeys(chromedp.CSS("#f-meta"), "track=canary"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '1'`),
	)
	b.Do(browsertest.Timeout, "batch drain asks for confirmation with the count",
		chromedp.Click(chromedp.CSS("#batch-drain")),
		browsertest.WaitJS(`!document.querySelector('#confirm').hidden && document.querySelector('#confirm-text').dataset.count === '1'`),
	)
	b.Screenshot("confirm")
	b.Do(browsertest.Timeout, "confirm and see the matching row draining",
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.dataset.draining === 'yes'`),
	)
	// Widen the filter to the zone: two canaries of v1 and v2 match.
	b.Do(browsertest.Timeout, "filter zone eu-1a, track=canary",
		setField("#f-version", "", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '2'`),
		chromedp.Click(chromedp.CSS("#batch-drain")),
		browsertest.WaitJS(`document.querySelector('#confirm-text').dataset.count === '2'`),
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		browsertest.WaitJS(rowJS("10.0.0.1:9004")+`.dataset.draining === 'yes'`),
		browsertest.WaitJS(`document.querySelector('#result').dataset.done === '2'`),
	)
	b.Do(browsertest.Timeout, "clear the filters: every instance, two drained",
		setField("#f-zone", "", "change"),
		setField("#f-meta", "", "input"),
		browsertest.WaitJS(`document.querySelectorAll('#instances tbody tr[data-draining="yes"]').length === 2 &&
			document.querySelectorAll('#instances tbody tr').length === 4`),
	)
	if ttl := b.Text(row("10.0.0.1:9002") + " td.ttl"); !strings.HasSuffix(ttl, "s") {
		t.Errorf("lease time left = %q, want seconds", ttl)
	}
	b.Screenshot("fleet")
	want := map[string]bool{"10.0.0.1:9001": true, "10.0.0.1:9002": false, "10.0.0.1:9003": false, "10.0.0.1:9004": true}
	for id, drained := range want {
		got := f.override("payments", id)
		if drained != strings.Contains(got, `"weight":0`) || (!drained && got != "") {
			t.Errorf("override of %s = %q, want drained=%v", id, got, drained)
		}
	}
}

// TestConsoleUpdateKeepsRowsBeingEdited checks that a change to one
// instance leaves the other rows as they are: a weight being typed keeps
// its text and its focus, and the row stays the same element.
func TestConsoleUpdateKeepsRowsBeingEdited(t *testing.T) {
	f, b := adminPage(t)
	input := row("10.0.0.1:9002") + " input.weight-input"
	b.Do(browsertest.Timeout, "type a weight for 10.0.0.1:9002",
		chromedp.WaitVisible(chromedp.CSS(input)),
		chromedp.Focus(chromedp.CSS(input)),
		chromedp.SendKeys(chromedp.CSS(input), "35"),
		chromedp.Evaluate[chromedp.Void](`window.editedRow = `+rowJS("10.0.0.1:9002")),
	)
	rev := browsertest.Eval[string](b, `document.body.dataset.revision`)
	f.register(instance("payments", 9003, "eu-1b", "v2", nil))
	b.Do(browsertest.Timeout, "see the new instance",
		browsertest.WaitJS(rowJS("10.0.0.1:9003")+` !== null && document.body.dataset.revision !== `+strconv.Quote(rev)))
	if !browsertest.Eval[bool](b, `window.editedRow === `+rowJS("10.0.0.1:9002")) {
		t.Error("the row being edited was replaced by an update to another instance")
	}
	if got := browsertest.Eval[string](b, `document.querySelector(`+strconv.Quote(input)+`).value`); got != "35" {
		t.Errorf("weight being typed = %q after an update, want %q", got, "35")
	}
	if !browsertest.Eval[bool](b, `document.activeElement === document.querySelector(`+strconv.Quote(input)+`)`) {
		t.Error("the weight input lost its focus on an update to another instance")
	}
}

func TestConsoleReadOnlyHasNoActionsAndRefusesPosts(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", rowJS("10.0.0.1:9001")+` !== null && document.querySelector('#mode').textContent === 'read-only'`)
	if n := browsertest.Eval[int](b, `document.querySelectorAll('#instances button, #instances input').length`); n != 0 {
		t.Errorf("read-only page has %d action controls in the table", n)
	}
	// What the user sees, not only the attributes: a style rule can show
	// an element marked hidden.
	if n := browsertest.Eval[int](b, `[...document.querySelectorAll('#batch button, #batch input, #login input, #login button, #policy-edit input, #policy-edit button')].filter(e => e.getClientRects().length > 0).length`); n != 0 {
		t.Errorf("read-only page shows %d batch, login or policy controls", n)
	}
	body := `{"action":"drain","service":"payments","ids":["10.0.0.1:9001"]}`
	for _, path := range []string{"api/action", "api/login"} {
		resp, err := http.Post(f.url+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("forged POST %s: status %d, want 403", path, resp.StatusCode)
		}
	}
	if got := f.override("payments", "10.0.0.1:9001"); got != "" {
		t.Errorf("override after forged POST = %q, want none", got)
	}
}

func TestConsoleRendersMetadataAsText(t *testing.T) {
	f := newFixture(t)
	const evil = `<script>alert(1)</script>`
	f.register(instance("payments", 9001, "<b>zone</b>", `<img src=x onerror=alert(2)>`, map[string]string{"note": evil}))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", rowJS("10.0.0.1:9001")+` !== null`)
	if got := b.Text(row("10.0.0.1:9001") + " td.metadata"); got != "note="+evil {
		t.Errorf("metadata cell text = %q, want %q", got, "note="+evil)
	}
	if n := browsertest.Eval[int](b, `document.querySelectorAll('#instances tbody script, #instances tbody img, #instances tbody b').length`); n != 0 {
		t.Errorf("registry values became %d elements", n)
	}
	b.Do(browsertest.Timeout, "services page", chromedp.Navigate(f.url),
		browsertest.WaitJS(`document.querySelector('#services tr[data-service="payments"]') !== null`))
	if got := b.Text(`#services tr[data-service="payments"]`); !strings.Contains(got, "<b>zone</b>") {
		t.Errorf("services row = %q, want the zone as text", got)
	}
	if n := browsertest.Eval[int](b, `document.querySelectorAll('#services tbody b, #services tbody img').length`); n != 0 {
		t.Errorf("registry values became %d elements on the services page", n)
	}
	select {
	case msg := <-b.Dialogs:
		t.Errorf("a registry value ran as script: dialog %q", msg)
	default:
	}
}

func TestConsoleResumesAfterEtcdRestart(t *testing.T) {
	f := newFixture(t)
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	b := browsertest.Start(t)
	openService(t, b, f, "payments", rowJS("10.0.0.1:9001")+` !== null`)
	m := f.cluster.Members()[0]
	m.Stop(t)
	b.Do(browsertest.Timeout, "the page says the registry is unreachable",
		browsertest.WaitJS(`!document.querySelector('#banner').hidden && document.querySelector('#banner').textContent.includes('stale')`))
	b.Screenshot("stale")
	m.Restart(t)
	registrytest.RegisterEventually(t, f.reg, registry.Instance{Name: "payments", Addr: "10.0.0.2:9002"})
	b.Do(browsertest.Timeout, "the page shows the current list and no banner",
		browsertest.WaitJS(rowJS("10.0.0.2:9002")+` !== null && `+rowJS("10.0.0.1:9001")+` !== null`),
		browsertest.WaitJS(`document.querySelector('#banner').hidden`),
	)
}

// A service page opened while etcd is down says that the registry is
// unreachable and that nothing is loaded yet, never "No instances." (which
// an operator reads as every instance gone) nor that the console's own
// connection is lost; once etcd answers, it shows the instances and no
// banner. Without the stream opened while nothing answers, the page gets
// 503 and says the console connection is lost; without the page's check of
// "loaded", it says "No instances.".
func TestConsoleServicePageOpenedDuringOutage(t *testing.T) {
	f := newFixture(t, console.WithRequestTimeout(time.Second))
	f.register(instance("payments", 9001, "eu-1a", "v1", nil))
	m := f.cluster.Members()[0]
	m.Stop(t)
	b := browsertest.Start(t)
	openService(t, b, f, "payments", `(() => { const p = document.querySelector('#no-instances');
		return !p.hidden && p.dataset.state === 'unknown'; })()`)
	for sel, want := range map[string]string{
		"#no-instances": "nothing loaded yet",
		"#banner":       "Registry unreachable since ",
		"#summary":      "not loaded: registry unreachable",
	} {
		if got := b.Text(sel); !strings.Contains(got, want) {
			t.Errorf("%s = %q, want it to say %q", sel, got, want)
		}
	}
	if got := b.Text("#banner"); strings.Contains(got, "Console connection lost") {
		t.Errorf("banner = %q: the console's connection works", got)
	}
	b.Screenshot("opened-during-outage")
	m.Restart(t)
	b.Do(browsertest.Timeout, "once etcd answers, the page shows the instance and no banner",
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+` !== null`),
		browsertest.WaitJS(`document.querySelector('#banner').hidden && document.querySelector('#no-instances').hidden`),
	)
}

func TestConsolePagesLargeServices(t *testing.T) {
	f := newFixture(t)
	putInstances(t, f.cli, "big", 1200)
	b := browsertest.Start(t)
	rows := func(n int) string {
		return fmt.Sprintf(`document.querySelectorAll('#instances tbody tr').length === %d`, n)
	}
	openService(t, b, f, "big", `document.querySelector('#matching').dataset.count === '1200' && `+rows(500))
	if got := b.Text("#page-text"); got != "rows 1–500 of 1200" {
		t.Errorf("pager = %q", got)
	}
	b.Do(browsertest.Timeout, "page 3 has the last 200 rows",
		chromedp.Click(chromedp.CSS("#page-next")), browsertest.WaitJS(rows(500)),
		chromedp.Click(chromedp.CSS("#page-next")), browsertest.WaitJS(rows(200)),
		browsertest.WaitJS(`document.querySelector('#page-next').disabled`))
	b.Do(browsertest.Timeout, "a filter goes back to the first page",
		setField("#f-zone", "zone-0", "change"), browsertest.WaitJS(rows(400)),
		browsertest.WaitJS(`document.querySelector('#pager').hidden`))
}

// TestConsoleUpdateKeepsRowsOfOneIDFromTwoSources is the same with two
// sources listing an instance of one ID (Muster's and go-zero's): each is
// a row of its own, kept on an update elsewhere.
func TestConsoleUpdateKeepsRowsOfOneIDFromTwoSources(t *testing.T) {
	gz, err := legacy.NewGoZero(legacy.WithName("payments", "payments.rpc"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, console.WithAdminToken(adminToken), console.WithLegacy("go-zero", gz, "payments"))
	f.register(instance("payments", 9001, "eu-1a", "v1", nil)) // ID 10.0.0.1:9001
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// go-zero's instance of the same ID, at another address.
	if _, err := f.cli.Put(ctx, "payments.rpc/10.0.0.1:9001", "10.0.0.9:9000"); err != nil {
		t.Fatal(err)
	}
	b := browsertest.Start(t)
	openService(t, b, f, "payments", `document.querySelectorAll('#instances tbody tr').length === 2`)
	login(t, b)
	const musterRow = `#instances tbody tr[data-muster="yes"]`
	input := musterRow + " input.weight-input"
	b.Do(browsertest.Timeout, "type a weight for Muster's instance",
		chromedp.WaitVisible(chromedp.CSS(input)),
		chromedp.Focus(chromedp.CSS(input)),
		chromedp.SendKeys(chromedp.CSS(input), "35"),
		chromedp.Evaluate[chromedp.Void](`window.editedRow = document.querySelector(`+strconv.Quote(musterRow)+`)`),
	)
	rev := browsertest.Eval[string](b, `document.body.dataset.revision`)
	f.register(instance("payments", 9003, "eu-1b", "v2", nil))
	b.Do(browsertest.Timeout, "see the new instance",
		browsertest.WaitJS(rowJS("10.0.0.1:9003")+` !== null && document.body.dataset.revision !== `+strconv.Quote(rev)))
	if !browsertest.Eval[bool](b, `window.editedRow === document.querySelector(`+strconv.Quote(musterRow)+`)`) {
		t.Error("the row being edited was replaced by an update to another instance")
	}
	if got := browsertest.Eval[string](b, `document.querySelector(`+strconv.Quote(input)+`).value`); got != "35" {
		t.Errorf("weight being typed = %q after an update, want %q", got, "35")
	}
}
