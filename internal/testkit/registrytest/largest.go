package registrytest

import (
	"fmt"
	"strings"
	"time"

	"github.com/musterhq/muster/registry"
)

// LargestInstance returns the instance n of service name whose value is
// the largest registry.Validate lets through: every field at its limit
// (the name aside), each byte one that JSON writes as a six-byte escape
// ("\u003c" in the ID, "\u0001" elsewhere). Instances of different n have
// different IDs and the same size.
func LargestInstance(name string, n int) registry.Instance {
	escaped := func(size int) string { return strings.Repeat("\x01", size) }
	md := make(map[string]string, registry.MaxMetadataKeys)
	for i := range registry.MaxMetadataKeys {
		md[fmt.Sprintf("%c%c", 1+i%31, 1+i/31)+escaped(registry.MaxMetadataKeyLen-2)] = escaped(registry.MaxMetadataValueLen)
	}
	id := fmt.Sprintf("%04d", n)
	return registry.Instance{
		ID:      id + strings.Repeat("<", registry.MaxIDLen-len(id)),
		Name:    name,
		Version: escaped(registry.MaxVersionLen), Zone: escaped(registry.MaxZoneLen), Region: escaped(registry.MaxRegionLen),
		Addr:         strings.Repeat("a", registry.MaxHostLen) + ":65535",
		Weight:       registry.MaxWeight,
		Metadata:     md,
		RegisteredAt: time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC),
	}
}
