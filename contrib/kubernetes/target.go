package kubernetes

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/musterhq/muster/registry"
)

// serviceRef is a Kubernetes service: a name in a namespace.
type serviceRef struct {
	name, namespace string
}

// key is the Muster name of the service: "name.namespace".
func (r serviceRef) key() string { return r.name + "." + r.namespace }

// parseService splits a Muster service name into a Kubernetes service:
// "name.namespace", or "name" in namespace ns. Kubernetes names have no
// dots, so the split is unambiguous; any other form is an invalid name.
func parseService(s, ns string) (serviceRef, error) {
	if err := registry.ValidateName(s); err != nil {
		return serviceRef{}, err
	}
	name, namespace, dotted := strings.Cut(s, ".")
	if !dotted {
		namespace = ns
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return serviceRef{}, &registry.FieldError{Field: "name", Reason: fmt.Sprintf("%q is not a Kubernetes service name: %s", name, strings.Join(errs, "; "))}
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return serviceRef{}, &registry.FieldError{Field: "name", Reason: fmt.Sprintf("%q is not a Kubernetes namespace (want name or name.namespace): %s", namespace, strings.Join(errs, "; "))}
	}
	return serviceRef{name: name, namespace: namespace}, nil
}
