package kubernetes_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/musterhq/muster/contrib/kubernetes"
	"github.com/musterhq/muster/registry"
)

// cond is an endpoint's condition as the EndpointSlice controller sets it.
type cond int

const (
	isReady       cond = iota // ready, serving
	isTerminating             // not ready, serving, terminating (draining)
	isGone                    // not ready, not serving, terminating
	isStarting                // not ready, not serving, not terminating
)

// ep returns an endpoint of pod at addr in zone with conditions c.
func ep(addr, pod, zone string, c cond) discoveryv1.Endpoint {
	b := func(v bool) *bool { return &v }
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Zone: &zone, NodeName: new("node-" + zone)}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod}
	}
	switch c {
	case isReady:
		e.Conditions = discoveryv1.EndpointConditions{Ready: b(true), Serving: b(true), Terminating: b(false)}
	case isTerminating:
		e.Conditions = discoveryv1.EndpointConditions{Ready: b(false), Serving: b(true), Terminating: b(true)}
	case isGone:
		e.Conditions = discoveryv1.EndpointConditions{Ready: b(false), Serving: b(false), Terminating: b(true)}
	case isStarting:
		e.Conditions = discoveryv1.EndpointConditions{Ready: b(false), Serving: b(false), Terminating: b(false)}
	}
	return e
}

// slice returns an EndpointSlice of service in namespace "default" with
// one TCP port named "grpc".
func slice(name, service string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: &port, Protocol: new(corev1.ProtocolTCP)}},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// apply creates sl or, when it exists, updates it.
func apply(t *testing.T, c *fake.Clientset, sl *discoveryv1.EndpointSlice) {
	t.Helper()
	api := c.DiscoveryV1().EndpointSlices(sl.Namespace)
	if _, err := api.Get(ctxT(t), sl.Name, metav1.GetOptions{}); err == nil {
		if _, err := api.Update(ctxT(t), sl, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update slice %s: %v", sl.Name, err)
		}
		return
	}
	if _, err := api.Create(ctxT(t), sl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create slice %s: %v", sl.Name, err)
	}
}

func remove(t *testing.T, c *fake.Clientset, name string) {
	t.Helper()
	if err := c.DiscoveryV1().EndpointSlices("default").Delete(ctxT(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete slice %s: %v", name, err)
	}
}

func newDiscovery(t *testing.T, c *fake.Clientset, opts ...kubernetes.Option) *kubernetes.Discovery {
	t.Helper()
	d, err := kubernetes.NewDiscovery(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func follow(t *testing.T, d registry.Discovery, service string) registry.Watcher {
	t.Helper()
	w, err := d.Watch(ctxT(t), service)
	if err != nil {
		t.Fatalf("Watch %s: %v", service, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// byID returns the instance of s with id, or nil.
func byID(s registry.Snapshot, id string) *registry.Instance {
	for _, in := range s.Instances {
		if in.ID == id {
			return in
		}
	}
	return nil
}
