package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/musterhq/muster/registry"
)

func TestStateOf(t *testing.T) {
	tr, fa := new(true), new(false)
	for _, c := range []struct {
		ready, serving, terminating *bool
		want                        state
	}{
		{nil, nil, nil, ready}, // nil ready means true
		{tr, tr, fa, ready},
		{tr, nil, tr, ready}, // publishNotReadyAddresses: ready wins
		{fa, tr, tr, draining},
		{fa, nil, tr, draining}, // nil serving means true
		{fa, fa, tr, absent},
		{fa, tr, fa, absent},
		{fa, nil, nil, absent}, // nil terminating means false
	} {
		got := stateOf(discoveryv1.EndpointConditions{Ready: c.ready, Serving: c.serving, Terminating: c.terminating})
		if got != c.want {
			t.Errorf("ready %v serving %v terminating %v: state %d, want %d", deref(c.ready), deref(c.serving), deref(c.terminating), got, c.want)
		}
	}
}

func deref(b *bool) string {
	if b == nil {
		return "nil"
	}
	if *b {
		return "true"
	}
	return "false"
}

func testSlice(name string, typ discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name},
		AddressType: typ,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Port: new(int32(80))}},
	}
}

func podEP(pod string, addrs ...string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: addrs}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
	}
	return e
}

func ids(list []*registry.Instance) string {
	var s []string
	for _, in := range list {
		s = append(s, in.ID+"="+in.Addr)
	}
	return strings.Join(s, " ")
}

func TestInstancesIDsAndAddresses(t *testing.T) {
	m := mapping{service: "web.default", namespace: "default"}
	list, skips := m.instances([]*discoveryv1.EndpointSlice{
		testSlice("v4", discoveryv1.AddressTypeIPv4, podEP("p1", "10.0.0.1"), podEP("", "10.0.0.2")),
		testSlice("v6", discoveryv1.AddressTypeIPv6, podEP("p1", "fd00::1")),
		testSlice("dns", discoveryv1.AddressTypeFQDN, podEP("", "web-0.example.internal"), podEP("", "not a host")),
	}, nil)
	want := "10.0.0.1:80=10.0.0.1:80 10.0.0.2:80=10.0.0.2:80 [fd00::1]:80=[fd00::1]:80 web-0.example.internal:80=web-0.example.internal:80"
	if got := ids(list); got != want {
		t.Fatalf("instances\n got %s\nwant %s", got, want)
	}
	if len(skips) != 1 || skips[0].slice != "dns" || skips[0].endpoints != 1 {
		t.Fatalf("skips %+v, want the invalid host of slice dns", skips)
	}
}

func TestInstancesSkippedSlices(t *testing.T) {
	udp := testSlice("udp", discoveryv1.AddressTypeIPv4, podEP("u", "10.0.0.1"))
	udp.Ports[0].Protocol = new(corev1.ProtocolUDP)
	allPorts := testSlice("all", discoveryv1.AddressTypeIPv4, podEP("a", "10.0.0.2"))
	allPorts.Ports[0].Port = nil
	empty := testSlice("empty", discoveryv1.AddressTypeIPv4)
	empty.Ports = nil
	ok := testSlice("ok", discoveryv1.AddressTypeIPv4, podEP("o", "10.0.0.3"))
	list, skips := mapping{service: "web.default"}.instances([]*discoveryv1.EndpointSlice{udp, allPorts, empty, ok}, nil)
	if got := ids(list); got != "o=10.0.0.3:80" {
		t.Fatalf("instances %s", got)
	}
	if len(skips) != 2 {
		t.Fatalf("skips %+v, want udp and all (an empty slice without ports is no skip)", skips)
	}
}
