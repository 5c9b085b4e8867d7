package promsd

import (
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/musterhq/muster/registry"
)

// MetadataKey is the instance metadata key that holds where the instance
// serves its metrics: host:port, or :port for the host of its Addr.
// server.WithMetricsAddr sets it.
const MetadataKey = "metrics"

// colorKey is the metadata key of an instance's color (color.DefaultInstanceKey).
const colorKey = "color"

// labelPrefix starts every label a Handler sets.
const labelPrefix = "__meta_muster_"

// targetGroup is one entry of Prometheus's HTTP service discovery answer.
type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// MetricsTarget returns the scrape target of in: the host:port of its
// metadata key MetadataKey, with the host of in.Addr when the value is a
// bare :port. ok is false when in has no such key; err says why a value
// present does not parse.
func MetricsTarget(in *registry.Instance) (target string, ok bool, err error) {
	v, has := in.Metadata[MetadataKey]
	if !has {
		return "", false, nil
	}
	if err := ValidateMetricsAddr(v); err != nil {
		return "", false, err
	}
	host, port, _ := net.SplitHostPort(v)
	if host == "" {
		if host, _, err = net.SplitHostPort(in.Addr); err != nil || host == "" {
			return "", false, fmt.Errorf("promsd: metrics address %q: no host, and none in the instance address %q", v, in.Addr)
		}
	}
	return net.JoinHostPort(host, port), true, nil
}

// ValidateMetricsAddr checks a metrics address: host:port, or :port (the
// host of the instance's Addr), where host is an IP address or a DNS name
// and port is in 1..65535. The error names what is wrong.
func ValidateMetricsAddr(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("promsd: metrics address %q: want host:port or :port: %w", v, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("promsd: metrics address %q: port %q is not in 1..65535", v, port)
	}
	if host != "" && net.ParseIP(host) == nil && !validHostName(host) {
		return fmt.Errorf("promsd: metrics address %q: host %q is neither an IP address nor a DNS name", v, host)
	}
	return nil
}

// validHostName reports whether h is a plausible DNS name: 1..253 bytes of
// letters, digits, '.', '-' and '_'.
func validHostName(h string) bool {
	if h == "" || len(h) > registry.MaxHostLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// SafeKey reports whether metadata key k is carried as a label: whether
// the label a relabelling "labelmap" of __meta_muster_metadata_(.+) would
// make of it (k with every character outside [a-zA-Z0-9_] replaced by '_')
// starts with a letter and is neither "job" nor "instance". Any other key
// could set one of Prometheus's own labels (__address__,
// __metrics_path__, __scheme__, __param_<name>: where and how the target
// is scraped) or the target's identity (job, instance), so one registrant
// could move its scrape to another host or forge another service's
// series; such keys are left out of the labels and counted
// (Stats.SkippedLabels).
func SafeKey(k string) bool {
	if k == "" || !(k[0] >= 'a' && k[0] <= 'z' || k[0] >= 'A' && k[0] <= 'Z') {
		return false
	}
	return k != "job" && k != "instance"
}

// LabelName returns the label of metadata key k:
// __meta_muster_metadata_ followed by k with every character outside
// [a-zA-Z0-9_] replaced by '_'.
func LabelName(k string) string {
	var b strings.Builder
	b.Grow(len(labelPrefix) + len("metadata_") + len(k))
	b.WriteString(labelPrefix + "metadata_")
	for _, r := range k {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// group returns the target group of in, whose scrape target is target,
// and how many of its metadata keys it leaves out (SafeKey). Two metadata
// keys with one label (such as "a.b" and "a-b") give it the value of the
// first in sorted order.
func group(service, target string, in *registry.Instance) (targetGroup, int) {
	labels := make(map[string]string, 9+len(in.Metadata))
	labels[labelPrefix+"service"] = service
	labels[labelPrefix+"id"] = in.ID
	labels[labelPrefix+"addr"] = in.Addr
	labels[labelPrefix+"zone"] = in.Zone
	labels[labelPrefix+"region"] = in.Region
	labels[labelPrefix+"version"] = in.Version
	labels[labelPrefix+"color"] = in.Metadata[colorKey]
	labels[labelPrefix+"weight"] = strconv.Itoa(in.EffectiveWeight())
	labels[labelPrefix+"draining"] = strconv.FormatBool(in.Draining)
	keys := make([]string, 0, len(in.Metadata))
	for k := range in.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	unsafe := 0
	for _, k := range keys {
		if !SafeKey(k) {
			unsafe++
			continue
		}
		name := LabelName(k)
		if _, taken := labels[name]; !taken {
			labels[name] = in.Metadata[k]
		}
	}
	return targetGroup{Targets: []string{target}, Labels: labels}, unsafe
}

// encoded is one instance's part of the answer.
type encoded struct {
	json   []byte // the target group; nil when in is not a target
	err    error  // why in's metrics address does not parse
	unsafe int    // its metadata keys left out of the labels (SafeKey)
}

// encode returns in's part of the answer.
func encode(service string, in *registry.Instance) encoded {
	target, ok, err := MetricsTarget(in)
	if !ok {
		return encoded{err: err}
	}
	g, unsafe := group(service, target, in)
	b, err := json.Marshal(g)
	if err != nil { // strings and maps of strings always encode
		return encoded{err: fmt.Errorf("promsd: encode %s/%s: %w", service, in.ID, err)}
	}
	return encoded{json: b, unsafe: unsafe}
}
