package registry

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"
)

// Limits on an Instance's fields, enforced by Validate.
const (
	// MaxNameLen is the longest service name, in bytes.
	MaxNameLen = 128
	// MaxIDLen is the longest instance ID, in bytes.
	MaxIDLen = 128
	// MaxVersionLen is the longest version string, in bytes.
	MaxVersionLen = 128
	// MaxZoneLen is the longest zone string, in bytes.
	MaxZoneLen = 128
	// MaxRegionLen is the longest region string, in bytes.
	MaxRegionLen = 128
	// MaxMetadataKeys is the most metadata entries an instance may carry.
	MaxMetadataKeys = 64
	// MaxMetadataKeyLen is the longest metadata key, in bytes.
	MaxMetadataKeyLen = 128
	// MaxMetadataValueLen is the longest metadata value, in bytes.
	MaxMetadataValueLen = 512
	// MaxHostLen is the longest host part of an address, in bytes: the
	// longest DNS name.
	MaxHostLen = 253
	// MaxWeight is the largest instance weight.
	MaxWeight = 10000
	// DefaultWeight is the weight of an instance that does not set one.
	DefaultWeight = 100
)

// Instance is one running copy of a service, as announced by a Registrar and
// seen by Discovery.
type Instance struct {
	// ID identifies the instance within its service. It is the last element
	// of the instance's key, so it must be stable for the life of the
	// process: a re-registration rewrites the same key instead of adding a
	// new one. Empty means "use Addr" (see Normalize). At most MaxIDLen
	// printable ASCII bytes, without '/'.
	ID string
	// Name is the service name: [a-z0-9][a-z0-9._-]*, at most MaxNameLen
	// bytes. Required.
	Name string
	// Version is the software version, free-form (e.g. "v1.4.2"). Optional.
	Version string
	// Addr is the address clients dial, host:port. Required; the host must
	// be an IP address or a DNS name of at most MaxHostLen bytes and the
	// port must be 1..65535.
	Addr string
	// Zone is the failure domain the instance runs in (e.g. "eu-1a").
	// Optional.
	Zone string
	// Region is the group of zones the instance runs in (e.g. "eu-1"),
	// one network and latency domain. Optional; printable, at most
	// MaxRegionLen bytes, as Zone.
	Region string
	// Weight is the instance's relative share of new calls, 1..MaxWeight.
	// Zero means DefaultWeight. To take no new calls while staying
	// registered, set Draining.
	Weight int
	// Draining marks an instance that is registered but takes no new calls.
	// It is stored as weight 0.
	Draining bool
	// Metadata holds free-form string pairs passed to balancers and
	// filters. At most MaxMetadataKeys entries.
	Metadata map[string]string
	// RegisteredAt is when the instance was first registered. The
	// Registrar sets it when it is zero.
	RegisteredAt time.Time
}

// EffectiveWeight returns the weight balancers use: 0 when Draining,
// DefaultWeight when Weight is zero, else Weight.
func (in Instance) EffectiveWeight() int {
	switch {
	case in.Draining:
		return 0
	case in.Weight == 0:
		return DefaultWeight
	default:
		return in.Weight
	}
}

// Normalize returns a copy of in with defaults applied: ID defaults to Addr
// and Weight to DefaultWeight. Metadata is copied, so the result shares no
// memory with in.
func (in Instance) Normalize() Instance {
	out := in
	if out.ID == "" {
		out.ID = out.Addr
	}
	if out.Weight == 0 && !out.Draining {
		out.Weight = DefaultWeight
	}
	if in.Metadata != nil {
		out.Metadata = make(map[string]string, len(in.Metadata))
		for k, v := range in.Metadata {
			out.Metadata[k] = v
		}
	}
	return out
}

// Equal reports whether two instances describe the same registration, field
// by field. RegisteredAt is compared with time.Time.Equal.
func (in Instance) Equal(o Instance) bool {
	if in.ID != o.ID || in.Name != o.Name || in.Version != o.Version ||
		in.Addr != o.Addr || in.Zone != o.Zone || in.Region != o.Region || in.Weight != o.Weight ||
		in.Draining != o.Draining || !in.RegisteredAt.Equal(o.RegisteredAt) ||
		len(in.Metadata) != len(o.Metadata) {
		return false
	}
	for k, v := range in.Metadata {
		if ov, ok := o.Metadata[k]; !ok || ov != v {
			return false
		}
	}
	return true
}

// EqualInstances reports whether a and b hold equal instances (Equal) in
// the same order, as two Snapshots' sorted lists do; an instance that is
// the same pointer in both is not compared further.
func EqualInstances(a, b []*Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !a[i].Equal(*b[i]) {
			return false
		}
	}
	return true
}

// ErrInvalidInstance is matched (with errors.Is) by every error Validate
// returns.
var ErrInvalidInstance = errors.New("registry: invalid instance")

// FieldError is the error Validate returns: it names the field that is wrong
// and why. It matches ErrInvalidInstance.
type FieldError struct {
	// Field is the name of the offending field, as in the JSON value
	// ("name", "addr", "metadata", ...).
	Field string
	// Reason says what is wrong with it.
	Reason string

	what string // "instance" when empty, or "canary", "policy"
}

// Error implements error.
func (e *FieldError) Error() string {
	what := e.what
	if what == "" {
		what = "instance"
	}
	return "registry: invalid " + what + ": " + e.Field + ": " + e.Reason
}

// Is makes a FieldError match ErrInvalidInstance.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidInstance }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// settingErr is fieldErr for a service setting (what: "canary",
// "policy").
func settingErr(what, field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), what: what}
}

// Validate checks every field of in against the rules documented on
// Instance and returns a *FieldError naming the first field that breaks
// them. An empty ID is accepted (Normalize fills it in).
func (in Instance) Validate() error {
	if err := ValidateName(in.Name); err != nil {
		return err
	}
	if in.ID != "" {
		if err := ValidateID(in.ID); err != nil {
			return err
		}
	}
	if err := validateAddr(in.Addr); err != nil {
		return err
	}
	if err := validateText("version", in.Version, MaxVersionLen); err != nil {
		return err
	}
	if err := validateText("zone", in.Zone, MaxZoneLen); err != nil {
		return err
	}
	if err := validateText("region", in.Region, MaxRegionLen); err != nil {
		return err
	}
	if in.Weight < 0 || in.Weight > MaxWeight {
		return fieldErr("weight", "%d is out of range 0..%d", in.Weight, MaxWeight)
	}
	return validateMetadata(in.Metadata)
}

// ValidateName checks a service name: [a-z0-9][a-z0-9._-]*, 1 to
// MaxNameLen bytes. It returns a *FieldError for field "name".
func ValidateName(name string) error {
	if name == "" {
		return fieldErr("name", "must not be empty")
	}
	if len(name) > MaxNameLen {
		return fieldErr("name", "%d bytes is longer than %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		lowerOrDigit := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if i == 0 && !lowerOrDigit {
			return fieldErr("name", "%q must start with a lower-case letter or digit", name)
		}
		if !lowerOrDigit && c != '.' && c != '_' && c != '-' {
			return fieldErr("name", "%q has %q at byte %d; allowed are a-z, 0-9, '.', '_' and '-'", name, c, i)
		}
	}
	return nil
}

// ValidateID checks an instance ID: 1 to MaxIDLen printable ASCII bytes,
// without '/' or spaces. It returns a *FieldError for field "id".
func ValidateID(id string) error {
	if id == "" {
		return fieldErr("id", "must not be empty")
	}
	if len(id) > MaxIDLen {
		return fieldErr("id", "%d bytes is longer than %d", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return fieldErr("id", "%q has %q at byte %d; allowed is printable ASCII without '/' or space", id, c, i)
		}
	}
	return nil
}

func validateAddr(addr string) error {
	if addr == "" {
		return fieldErr("addr", "must not be empty")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fieldErr("addr", "%q is not host:port: %v", addr, err)
	}
	if host == "" {
		return fieldErr("addr", "%q has no host; advertise an address clients can dial", addr)
	}
	if len(host) > MaxHostLen {
		return fieldErr("addr", "host of %d bytes is longer than %d", len(host), MaxHostLen)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fieldErr("addr", "%q has port %q; want a number 1..65535", addr, port)
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fieldErr("addr", "%q has host %q, which is neither an IP address nor a DNS name", addr, host)
		}
	}
	return nil
}

func validateText(field, s string, max int) error {
	if len(s) > max {
		return fieldErr(field, "%d bytes is longer than %d", len(s), max)
	}
	if !utf8.ValidString(s) {
		return fieldErr(field, "is not valid UTF-8")
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return fieldErr("metadata", "%d keys is more than %d", len(md), MaxMetadataKeys)
	}
	// Sorted, so that the error names the same key every time.
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := md[k]; {
		case k == "":
			return fieldErr("metadata", "empty key")
		case len(k) > MaxMetadataKeyLen:
			return fieldErr("metadata", "key %.32q... is %d bytes, longer than %d", k, len(k), MaxMetadataKeyLen)
		case len(v) > MaxMetadataValueLen:
			return fieldErr("metadata", "value of key %q is %d bytes, longer than %d", k, len(v), MaxMetadataValueLen)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fieldErr("metadata", "key %q or its value is not valid UTF-8", k)
		}
	}
	return nil
}
