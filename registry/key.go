package registry

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the key prefix under which services are stored unless a
// backend is configured with another.
const DefaultPrefix = "/muster/services"

// ServicePrefix returns the key prefix of every instance of service:
// "<prefix>/<service>/". The trailing slash keeps a watch on "foo" from
// seeing "foobar".
func ServicePrefix(prefix, service string) string {
	return strings.TrimRight(prefix, "/") + "/" + service + "/"
}

// Key returns the key of one instance: "<prefix>/<service>/<id>".
func Key(prefix, service, id string) string {
	return ServicePrefix(prefix, service) + id
}

// ParseKey splits a key made by Key back into service and instance ID. It
// fails when key is not under prefix or does not have exactly the two
// elements <service>/<id> below it.
func ParseKey(prefix, key string) (service, id string, err error) {
	p := strings.TrimRight(prefix, "/") + "/"
	rest, ok := strings.CutPrefix(key, p)
	if !ok {
		return "", "", fmt.Errorf("registry: key %q is not under prefix %q", key, p)
	}
	service, id, ok = strings.Cut(rest, "/")
	if !ok || service == "" || id == "" || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("registry: key %q is not <prefix>/<service>/<id>", key)
	}
	return service, id, nil
}
