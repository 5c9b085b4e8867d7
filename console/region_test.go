package console_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/registry"
)

// The service view carries each instance's region (absent when it has
// none) and the services view the regions of each service, sorted.
func TestConsoleViewsCarryRegion(t *testing.T) {
	f := newFixture(t)
	f.register(registry.Instance{ID: "a", Name: "payments", Addr: "10.0.0.1:9001", Zone: "eu-1a", Region: "eu-1"})
	f.register(registry.Instance{ID: "b", Name: "payments", Addr: "10.0.0.1:9002", Zone: "us-1a", Region: "us-1"})
	f.register(registry.Instance{ID: "c", Name: "payments", Addr: "10.0.0.1:9003", Zone: "eu-1b"})

	ev := firstEvent(t, f.url+"api/service/events?name=payments", "")
	var st struct {
		Instances []map[string]any `json:"instances"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &st); err != nil {
		t.Fatalf("decode %s: %v", ev.Data, err)
	}
	if len(st.Instances) != 3 {
		t.Fatalf("service view %s, want 3 instances", ev.Data)
	}
	for i, want := range []any{"eu-1", "us-1", nil} {
		if got := st.Instances[i]["region"]; got != want {
			t.Errorf("instance %v: region %v, want %v (view %s)", st.Instances[i]["id"], got, want, ev.Data)
		}
	}

	ev = firstEvent(t, f.url+"api/services/events", "")
	var fleet struct {
		Services []struct {
			Name    string   `json:"name"`
			Zones   []string `json:"zones"`
			Regions []string `json:"regions"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &fleet); err != nil {
		t.Fatalf("decode %s: %v", ev.Data, err)
	}
	if len(fleet.Services) != 1 || !reflect.DeepEqual(fleet.Services[0].Regions, []string{"eu-1", "us-1"}) ||
		!reflect.DeepEqual(fleet.Services[0].Zones, []string{"eu-1a", "eu-1b", "us-1a"}) {
		t.Fatalf("services view %s, want payments with zones eu-1a, eu-1b, us-1a and regions eu-1, us-1", ev.Data)
	}
}

// The pages show the region beside the zone: a Regions column on the
// services page, a Region column and filter on the service page.
func TestConsolePagesShowRegion(t *testing.T) {
	f := newFixture(t)
	f.register(registry.Instance{Name: "payments", Addr: "10.0.0.1:9001", Zone: "eu-1a", Region: "eu-1"})
	f.register(registry.Instance{Name: "payments", Addr: "10.0.0.1:9002", Zone: "us-1a", Region: "us-1"})
	// A region is rendered as text, never as markup.
	f.register(registry.Instance{Name: "payments", Addr: "10.0.0.1:9003", Region: "<b>r</b>"})
	f.register(registry.Instance{Name: "payments", Addr: "10.0.0.1:9004"})
	b := browsertest.Start(t)
	b.Do(browsertest.Timeout, "the services page lists the regions of payments",
		chromedp.Navigate(f.url),
		browsertest.WaitJS(`(() => { const r = document.querySelector('#services tr[data-service="payments"] td.regions');
			return r && r.textContent === '<b>r</b>, eu-1, us-1'; })()`))
	// No name, zone, version or color holds "<b>r": only the region does.
	b.Do(browsertest.Timeout, "the services filter matches a region",
		setField("#filter", "<b>r", "input"),
		browsertest.WaitJS(`document.querySelectorAll('#services tbody tr').length === 1`),
		setField("#filter", "nowhere-1", "input"),
		browsertest.WaitJS(`document.querySelectorAll('#services tbody tr').length === 0`))

	openService(t, b, f, "payments", rowJS("10.0.0.1:9004")+` !== null`)
	b.Do(browsertest.Timeout, "the region cells show each region as text, none empty, after the zone",
		browsertest.WaitJS(regionCellIs("10.0.0.1:9001", "eu-1")),
		browsertest.WaitJS(regionCellIs("10.0.0.1:9002", "us-1")),
		browsertest.WaitJS(regionCellIs("10.0.0.1:9003", "<b>r</b>")),
		browsertest.WaitJS(regionCellIs("10.0.0.1:9004", "")),
		browsertest.WaitJS(rowJS("10.0.0.1:9003")+`.querySelector('td.region b') === null`),
		browsertest.WaitJS(rowJS("10.0.0.1:9001")+`.querySelector('td.zone').nextElementSibling.classList.contains('region')`),
		browsertest.WaitJS(`[...document.querySelectorAll('#instances thead th')].map((th) => th.textContent).join(',').includes('Zone,Region,Version')`))
	b.Do(browsertest.Timeout, "the region filter keeps the instance of us-1",
		setField("#f-region", "us-1", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '1' && `+rowJS("10.0.0.1:9002")+` !== null`))
	b.Do(browsertest.Timeout, "any region again",
		setField("#f-region", "", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '4'`))
}

// regionCellIs is a JavaScript expression: the region cell of instance
// id's row reads text.
func regionCellIs(id, text string) string {
	return fmt.Sprintf(`(() => { const r = %s; return r !== null && r.querySelector('td.region').textContent === %q; })()`, rowJS(id), text)
}
