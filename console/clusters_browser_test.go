package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/registry"
)

// clusterRow is the selector of the service page's row of instance id in
// cluster.
func clusterRow(cluster, id string) string {
	return fmt.Sprintf(`#instances tbody tr[data-cluster=%q][data-id=%q]`, cluster, id)
}

// clusterRowJS is a JavaScript expression for that row.
func clusterRowJS(cluster, id string) string {
	return fmt.Sprintf(`document.querySelector(%q)`, clusterRow(cluster, id))
}

// overrideIn reads the override of one instance from the etcd cluster cli
// reaches; "" if none.
func overrideIn(t *testing.T, cli *clientv3.Client, service, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, registry.OverrideKey(registry.DefaultPrefix, service, id))
	if err != nil {
		t.Fatalf("read override of %s/%s: %v", service, id, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// A console over two etcd clusters: the services page shows each
// cluster's health and each service's instances per cluster; the service
// page shows each instance with its cluster (one ID in two clusters is two
// rows), filters by cluster, and a drain writes to the row's cluster only.
func TestConsoleClustersPages(t *testing.T) {
	f := newTwoClusters(t)
	euCli, usCli, url := f.euCli, f.usCli, f.url
	registerWith(t, f.euReg, registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9001", Zone: "eu-1a"})
	registerWith(t, f.usReg, registry.Instance{ID: "user-1", Name: "user", Addr: "10.1.0.1:9001", Zone: "us-1a"})
	registerWith(t, f.usReg, registry.Instance{ID: "user-2", Name: "user", Addr: "10.1.0.2:9001", Zone: "us-1b"})

	b := browsertest.Start(t)
	b.Do(browsertest.Timeout, "the services page shows both clusters fresh and user's instances per cluster",
		chromedp.Navigate(url),
		browsertest.WaitJS(`(() => {
			const h = document.querySelector('#cluster-health');
			const eu = document.querySelector('#cluster-health tr[data-cluster="eu"]');
			const us = document.querySelector('#cluster-health tr[data-cluster="us"]');
			return !h.hidden && document.querySelectorAll('#cluster-health tbody tr').length === 2 && eu && us &&
				eu.querySelector('td.state').dataset.state === 'fresh' && eu.querySelector('td.state').textContent === 'fresh' &&
				us.querySelector('td.state').dataset.state === 'fresh' && us.querySelector('td.state').textContent === 'fresh' &&
				eu.querySelector('td.region').textContent === 'eu-1' && us.querySelector('td.region').textContent === '' &&
				eu.querySelector('td.error').textContent === '' && us.querySelector('td.error').textContent === '' &&
				eu.querySelector('td.services').textContent === '1' && us.querySelector('td.services').textContent === '1'; })()`),
		browsertest.WaitJS(`(() => { const r = document.querySelector('#services tr[data-service="user"]');
			return r !== null && r.querySelector('td.count').textContent === '3' && r.querySelector('td.clusters') !== null &&
				r.querySelector('td.clusters').textContent === 'eu:1, us:2' &&
				!document.querySelector('#services th.clusters-col').hidden; })()`))
	b.Screenshot("clusters-services")

	b.Do(browsertest.Timeout, "open the page of user: three rows, user-1 in each cluster",
		chromedp.Navigate(url+"?name=user"),
		browsertest.WaitJS(`document.querySelectorAll('#instances tbody tr').length === 3`),
		browsertest.WaitJS(clusterRowJS("eu", "user-1")+` !== null && `+clusterRowJS("us", "user-1")+` !== null && `+clusterRowJS("us", "user-2")+` !== null`))
	for _, r := range []struct{ cluster, id, addr string }{
		{"eu", "user-1", "10.0.0.1:9001"}, {"us", "user-1", "10.1.0.1:9001"}, {"us", "user-2", "10.1.0.2:9001"},
	} {
		if got := b.Text(clusterRow(r.cluster, r.id) + " td.cluster"); got != r.cluster {
			t.Errorf("cluster cell of %s in %s = %q", r.id, r.cluster, got)
		}
		if got := b.Text(clusterRow(r.cluster, r.id) + " td.addr"); got != r.addr {
			t.Errorf("address of %s in %s = %q, want %s", r.id, r.cluster, got, r.addr)
		}
		if got := b.Text(clusterRow(r.cluster, r.id) + " td.metadata"); strings.Contains(got, "muster.cluster") {
			t.Errorf("metadata of %s in %s = %q: the cluster is a column, not a tag", r.id, r.cluster, got)
		}
	}
	b.Do(browsertest.Timeout, "the Cluster column is right after Address, and the clusters' table lists both",
		browsertest.WaitJS(`[...document.querySelectorAll('#instances thead th')].filter((th) => !th.hidden).map((th) => th.textContent).join(',').startsWith('ID,Address,Cluster,Zone')`),
		browsertest.WaitJS(`(() => { const eu = document.querySelector('#clusters tr[data-cluster="eu"]');
			const us = document.querySelector('#clusters tr[data-cluster="us"]');
			return !document.querySelector('#clusters').hidden && eu !== null && us !== null &&
				eu.querySelector('td.region').textContent === 'eu-1' && eu.querySelector('td.count').textContent === '1' &&
				us.querySelector('td.count').textContent === '2' &&
				eu.querySelector('td.health').textContent === 'fresh' && us.querySelector('td.health').textContent === 'fresh'; })()`),
		browsertest.WaitJS(`document.querySelector('#canary').hidden && document.querySelector('#policy').hidden && document.querySelector('#no-policy').hidden`),
		// Each row's lease, by its cluster and ID.
		browsertest.WaitJS(`[...document.querySelectorAll('#instances tbody td.ttl')].every((td) => td.dataset.until)`))
	b.Do(browsertest.Timeout, "the cluster filter keeps us's two instances",
		setField("#f-cluster", "us", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '2' &&
			document.querySelectorAll('#instances tbody tr').length === 2 &&
			document.querySelectorAll('#instances tbody tr[data-cluster="us"]').length === 2`),
		setField("#f-cluster", "", "change"),
		browsertest.WaitJS(`document.querySelector('#matching').dataset.count === '3'`))

	login(t, b)
	b.Do(browsertest.Timeout, "the policy editor offers the clusters",
		browsertest.WaitJS(`!document.querySelector('#policy-cluster').hidden &&
			[...document.querySelector('#policy-cluster').options].map((o) => o.value).join(',') === 'eu,us'`))
	b.Do(browsertest.Timeout, "drain user-1 of us and see that row draining, eu's not",
		chromedp.Click(chromedp.CSS(clusterRow("us", "user-1")+" button.drain")),
		browsertest.WaitJS(`document.querySelector('#result').dataset.done === '1'`),
		browsertest.WaitJS(clusterRowJS("us", "user-1")+`.dataset.draining === 'yes'`),
		browsertest.WaitJS(clusterRowJS("eu", "user-1")+`.dataset.draining === 'no'`))
	if got := overrideIn(t, usCli, "user", "user-1"); !strings.Contains(got, `"weight":0`) {
		t.Errorf("override of user-1 in us = %q, want weight 0", got)
	}
	if got := overrideIn(t, euCli, "user", "user-1"); got != "" {
		t.Errorf("override of user-1 in eu = %q, want none: the drain was us's", got)
	}
	if got := b.Text("#result-cmd"); got != "muster drain user user-1 --in us" {
		t.Errorf("equivalent command = %q", got)
	}
	b.Do(browsertest.Timeout, "the timeline and the operator writes name us",
		browsertest.WaitJS(`[...document.querySelectorAll('#timeline li[data-cluster="us"]')].some((li) => li.textContent.includes('user-1 in us'))`),
		browsertest.WaitJS(`(() => { const r = document.querySelector('#history tbody tr[data-cluster="us"][data-action="drain"]');
			return r !== null && !document.querySelector('#history th.cluster-col').hidden &&
				document.querySelectorAll('#history tbody tr').length === 1; })()`))
	b.Screenshot("clusters-service")

	b.Do(browsertest.Timeout, "set us's call policy: us's row shows it, eu's none",
		setField("#policy-cluster", "us", "change"),
		setField(`#policy-fields input[data-field="timeout"]`, "800ms", "input"),
		chromedp.Click(chromedp.CSS("#policy-save")),
		browsertest.WaitJS(`document.querySelector('#policy-result').dataset.done === 'yes'`),
		browsertest.WaitJS(`document.querySelector('#clusters tr[data-cluster="us"] td.policy').textContent === 'timeout 800ms' &&
			document.querySelector('#clusters tr[data-cluster="eu"] td.policy').textContent === ''`),
		browsertest.WaitJS(`document.querySelector('#policy-fields input[data-field="timeout"]').value === '800ms'`),
		setField("#policy-cluster", "eu", "change"),
		browsertest.WaitJS(`document.querySelector('#policy-fields input[data-field="timeout"]').value === ''`))
	if got := b.Text("#policy-cmd"); got != "muster policy user set timeout=800ms --in us" {
		t.Errorf("equivalent policy command = %q", got)
	}

	b.Do(browsertest.Timeout, "batch drain of every instance: one request per cluster, three drained",
		chromedp.Click(chromedp.CSS("#batch-drain")),
		browsertest.WaitJS(`!document.querySelector('#confirm').hidden && document.querySelector('#confirm-text').dataset.count === '3'`),
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		browsertest.WaitJS(`document.querySelector('#result').dataset.done === '3'`),
		browsertest.WaitJS(`document.querySelectorAll('#instances tbody tr[data-draining="yes"]').length === 3`))
	if got := overrideIn(t, euCli, "user", "user-1"); !strings.Contains(got, `"weight":0`) {
		t.Errorf("override of user-1 in eu after the batch drain = %q, want weight 0", got)
	}
	if got := b.Text("#result-cmd"); got != "muster drain user user-1 --in eu\nmuster drain user user-1 --in us\nmuster drain user user-2 --in us" {
		t.Errorf("equivalent commands = %q", got)
	}
}
