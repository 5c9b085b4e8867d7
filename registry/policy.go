package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Policy is the call policy of one service, set once by an operator
// ("muster policy") and applied by every client: Muster's resolver and
// balancers natively, every other gRPC client through the xDS control
// plane. It is stored under PolicyKey, beside the canary and bound to no
// lease. The zero Policy sets nothing: clients keep their own defaults.
// See docs/POLICY.md.
type Policy struct {
	// Timeout is the deadline of each call, when the caller sets none
	// shorter. 0: none. 1ms..1h.
	Timeout time.Duration
	// Retry says which failed calls are tried again.
	Retry RetryPolicy
	// Outlier ejects an endpoint whose calls fail too often.
	Outlier OutlierPolicy
	// MaxConcurrent caps a client's calls in flight to the service
	// (circuit breaking); a call over it fails at once with Unavailable.
	// 0: no cap. 1..1,000,000.
	MaxConcurrent int
	// AffinityHeader is the request header whose value keeps calls on one
	// endpoint under ring hash, and is the key of Muster's canaries and
	// affinity. "": DefaultAffinityHeader.
	AffinityHeader string
}

// RetryPolicy is a Policy's retries (gRFC A6 and A44).
type RetryPolicy struct {
	// MaxAttempts counts the first attempt: 2 retries once. 0 or 1: no
	// retries. At most MaxRetryAttempts (gRPC's cap).
	MaxAttempts int
	// Codes are the status codes that are retried, by their gRPC names
	// ("UNAVAILABLE", "RESOURCE_EXHAUSTED"); required with MaxAttempts >
	// 1.
	Codes []string
	// BackoffBase is the first retry's backoff (randomised, doubled each
	// retry) and BackoffMax its cap; defaults DefaultRetryBackoffBase and
	// DefaultRetryBackoffMax. 1ms..1m and BackoffBase..5m.
	BackoffBase, BackoffMax time.Duration
}

// OutlierPolicy is a Policy's outlier ejection by failure percentage
// (gRFC A50): an endpoint whose share of failed calls over an interval
// exceeds FailurePercent, out of at least MinRequests calls, is ejected
// for BaseEjection (longer on each ejection in a row), never more than
// MaxEjectedPercent of the endpoints at once.
type OutlierPolicy struct {
	// FailurePercent: 1..100; 0: no ejection by the policy (clients keep
	// their own).
	FailurePercent int
	// MinRequests is the calls an endpoint needs in an interval to be
	// judged: 1..1,000,000; default DefaultOutlierMinRequests.
	MinRequests int
	// BaseEjection is the first ejection's length: 1s..1h; default
	// DefaultOutlierBaseEjection.
	BaseEjection time.Duration
	// MaxEjectedPercent caps the endpoints ejected at once: 1..100;
	// default DefaultOutlierMaxEjectedPercent.
	MaxEjectedPercent int
}

// Defaults and bounds of a Policy's fields.
const (
	DefaultAffinityHeader           = "x-muster-key"
	MaxRetryAttempts                = 5
	DefaultRetryBackoffBase         = 100 * time.Millisecond
	DefaultRetryBackoffMax          = time.Second
	DefaultOutlierMinRequests       = 10
	DefaultOutlierBaseEjection      = 30 * time.Second
	DefaultOutlierMaxEjectedPercent = 50
	MaxPolicyTimeout                = time.Hour
	MaxConcurrentLimit              = 1_000_000
	maxHeaderLen                    = 128
)

// RetryableCodes are the status code names a RetryPolicy may list: every
// gRPC code but OK.
var RetryableCodes = []string{"CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
	"OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// PolicyKey returns the key of the policy of service:
// "<prefix>.policy/<service>" (by default "/muster/services.policy/user"),
// which no watch on the service's instances sees.
func PolicyKey(prefix, service string) string {
	return strings.TrimRight(prefix, "/") + ".policy/" + service
}

// IsZero reports whether p sets nothing.
func (p Policy) IsZero() bool {
	return p.Timeout == 0 && p.Retry.MaxAttempts <= 1 && p.Outlier.FailurePercent == 0 &&
		p.MaxConcurrent == 0 && p.AffinityHeader == ""
}

// Normalize returns p with the defaults of the fields its settings use
// filled in: retry backoffs when it retries, outlier minimum requests,
// ejection time and cap when it ejects. Codes is copied, upper-cased and
// rid of repeats, in the order given (nil when empty), so that a stored
// policy lists each code once; MaxAttempts 1 (no retries) becomes 0.
func (p Policy) Normalize() Policy {
	codes := make([]string, 0, len(p.Retry.Codes))
	for _, c := range p.Retry.Codes {
		if c = strings.ToUpper(c); !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	p.Retry.Codes = codes
	if len(p.Retry.Codes) == 0 {
		p.Retry.Codes = nil
	}
	if p.Retry.MaxAttempts == 1 {
		p.Retry.MaxAttempts = 0 // one attempt: no retries, as 0 says
	}
	if p.Retry.MaxAttempts > 1 {
		if p.Retry.BackoffBase == 0 {
			p.Retry.BackoffBase = DefaultRetryBackoffBase
		}
		if p.Retry.BackoffMax == 0 {
			p.Retry.BackoffMax = max(DefaultRetryBackoffMax, p.Retry.BackoffBase)
		}
	}
	if p.Outlier.FailurePercent > 0 {
		if p.Outlier.MinRequests == 0 {
			p.Outlier.MinRequests = DefaultOutlierMinRequests
		}
		if p.Outlier.BaseEjection == 0 {
			p.Outlier.BaseEjection = DefaultOutlierBaseEjection
		}
		if p.Outlier.MaxEjectedPercent == 0 {
			p.Outlier.MaxEjectedPercent = DefaultOutlierMaxEjectedPercent
		}
	}
	return p
}

// Affinity returns the header that keys affinity: AffinityHeader, or
// DefaultAffinityHeader.
func (p Policy) Affinity() string {
	if p.AffinityHeader == "" {
		return DefaultAffinityHeader
	}
	return p.AffinityHeader
}

// Validate checks every field of p (after Normalize) and returns a
// *FieldError naming the first that is out of its range, with the range.
// Field names are those of the JSON value and of "muster policy set".
func (p Policy) Validate() error {
	p = p.Normalize()
	if err := durationIn("timeout", p.Timeout, time.Millisecond, MaxPolicyTimeout, true); err != nil {
		return err
	}
	r := p.Retry
	if r.MaxAttempts < 0 || r.MaxAttempts > MaxRetryAttempts {
		return policyErr("retry.maxAttempts", "%d is out of range 0..%d (the first attempt counts; 0 or 1: no retries)", r.MaxAttempts, MaxRetryAttempts)
	}
	if r.MaxAttempts > 1 {
		if len(r.Codes) == 0 {
			return policyErr("retry.codes", "retries need at least one status code, of %s", strings.Join(RetryableCodes, ", "))
		}
		for _, c := range r.Codes {
			if !slices.Contains(RetryableCodes, c) {
				return policyErr("retry.codes", "%q is not a retryable status code; want one of %s", c, strings.Join(RetryableCodes, ", "))
			}
		}
		if err := durationIn("retry.backoffBase", r.BackoffBase, time.Millisecond, time.Minute, false); err != nil {
			return err
		}
		if err := durationIn("retry.backoffMax", r.BackoffMax, r.BackoffBase, 5*time.Minute, false); err != nil {
			return err
		}
	} else if len(r.Codes) > 0 || r.BackoffBase != 0 || r.BackoffMax != 0 {
		return policyErr("retry.maxAttempts", "codes and backoffs are set but maxAttempts is %d; want 2..%d to retry", r.MaxAttempts, MaxRetryAttempts)
	}
	o := p.Outlier
	if o.FailurePercent < 0 || o.FailurePercent > 100 {
		return policyErr("outlier.failurePercent", "%d is out of range 0..100 (0: no ejection)", o.FailurePercent)
	}
	if o.FailurePercent > 0 {
		if o.MinRequests < 1 || o.MinRequests > 1_000_000 {
			return policyErr("outlier.minRequests", "%d is out of range 1..1000000", o.MinRequests)
		}
		if err := durationIn("outlier.baseEjection", o.BaseEjection, time.Second, time.Hour, false); err != nil {
			return err
		}
		if o.MaxEjectedPercent < 1 || o.MaxEjectedPercent > 100 {
			return policyErr("outlier.maxEjectedPercent", "%d is out of range 1..100", o.MaxEjectedPercent)
		}
	} else if o.MinRequests != 0 || o.BaseEjection != 0 || o.MaxEjectedPercent != 0 {
		return policyErr("outlier.failurePercent", "the other outlier fields are set but failurePercent is 0; want 1..100 to eject")
	}
	if p.MaxConcurrent < 0 || p.MaxConcurrent > MaxConcurrentLimit {
		return policyErr("maxConcurrent", "%d is out of range 0..%d (0: no cap)", p.MaxConcurrent, MaxConcurrentLimit)
	}
	if h := p.AffinityHeader; h != "" {
		if err := validHeaderName(h); err != nil {
			return policyErr("affinityHeader", "%q: %v", h, err)
		}
	}
	return nil
}

func policyErr(field, format string, args ...any) error {
	return settingErr("policy", field, format, args...)
}

// durationIn checks that d is in lo..hi, or 0 when zeroOK.
func durationIn(field string, d, lo, hi time.Duration, zeroOK bool) error {
	if zeroOK && d == 0 {
		return nil
	}
	if d < lo || d > hi {
		zero := ""
		if zeroOK {
			zero = " (0: none)"
		}
		return policyErr(field, "%v is out of range %v..%v%s", d, lo, hi, zero)
	}
	return nil
}

// validHeaderName checks a request header name as gRPC clients send it:
// lower case letters, digits and "-_.", not reserved by gRPC ("grpc-") or
// HTTP/2 (":"), at most 128 bytes.
func validHeaderName(h string) error {
	if len(h) > maxHeaderLen {
		return fmt.Errorf("%d bytes is longer than %d", len(h), maxHeaderLen)
	}
	if strings.HasPrefix(h, "grpc-") {
		return fmt.Errorf("headers starting with grpc- are gRPC's own")
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("byte %d (%q) is not allowed; want lower case letters, digits, '-', '_' and '.'", i, c)
		}
	}
	return nil
}

// wirePolicy is the JSON value of a Policy: durations as Go duration
// strings, zero fields left out.
type wirePolicy struct {
	V              int          `json:"v"`
	Timeout        string       `json:"timeout,omitempty"`
	Retry          *wireRetry   `json:"retry,omitempty"`
	Outlier        *wireOutlier `json:"outlier,omitempty"`
	MaxConcurrent  int          `json:"maxConcurrent,omitempty"`
	AffinityHeader string       `json:"affinityHeader,omitempty"`
	// SetBy and SetAt (an RFC 3339 string, UTC) say who set the policy
	// and when; readers that do not know them ignore them, as they ignore
	// every unknown field. Raw, so that a value of another type is
	// ignored too, not an error.
	SetBy json.RawMessage `json:"setBy,omitempty"`
	SetAt json.RawMessage `json:"setAt,omitempty"`
}

type wireRetry struct {
	MaxAttempts int      `json:"maxAttempts"`
	Codes       []string `json:"codes"`
	BackoffBase string   `json:"backoffBase"`
	BackoffMax  string   `json:"backoffMax"`
}

type wireOutlier struct {
	FailurePercent    int    `json:"failurePercent"`
	MinRequests       int    `json:"minRequests"`
	BaseEjection      string `json:"baseEjection"`
	MaxEjectedPercent int    `json:"maxEjectedPercent"`
}

// MaxSetByLen bounds PolicyInfo.SetBy, in bytes.
const MaxSetByLen = 256

// PolicyInfo is a stored Policy with who set it and when, as SetPolicy
// records them (registry/etcd's WithBy). Clients read the Policy alone:
// a change of SetBy or SetAt is no change of the policy.
type PolicyInfo struct {
	Policy Policy
	// SetBy names who set the policy and from where, as
	// "alice (console)" or "bob (command)"; "" when not recorded. At
	// most MaxSetByLen bytes of printable UTF-8.
	SetBy string
	// SetAt is when the policy was set; the zero Time when not recorded.
	SetAt time.Time
}

// Validate checks the Policy (see Policy.Validate) and SetBy, which is a
// *FieldError for field "setBy" when it is longer than MaxSetByLen or not
// printable UTF-8.
func (info PolicyInfo) Validate() error {
	if err := info.Policy.Validate(); err != nil {
		return err
	}
	if len(info.SetBy) > MaxSetByLen {
		return policyErr("setBy", "%d bytes is longer than %d", len(info.SetBy), MaxSetByLen)
	}
	if !utf8.ValidString(info.SetBy) {
		return policyErr("setBy", "%q is not UTF-8", info.SetBy)
	}
	for _, r := range info.SetBy {
		if !unicode.IsPrint(r) {
			return policyErr("setBy", "%q has the unprintable character %q", info.SetBy, r)
		}
	}
	return nil
}

// MarshalPolicy validates and normalizes p and returns its JSON value, e.g.
// {"v":1,"timeout":"800ms","retry":{"maxAttempts":2,"codes":["UNAVAILABLE"],"backoffBase":"100ms","backoffMax":"1s"}}.
func MarshalPolicy(p Policy) ([]byte, error) {
	return MarshalPolicyInfo(PolicyInfo{Policy: p})
}

// MarshalPolicyInfo is MarshalPolicy with who set the policy and when
// (left out when not recorded): {"v":1,"timeout":"800ms","setBy":"alice
// (console)","setAt":"2026-12-03T10:20:00Z"}.
func MarshalPolicyInfo(info PolicyInfo) ([]byte, error) {
	if err := info.Validate(); err != nil {
		return nil, err
	}
	p := info.Policy.Normalize()
	w := wirePolicy{V: SchemaVersion, MaxConcurrent: p.MaxConcurrent, AffinityHeader: p.AffinityHeader}
	if info.SetBy != "" {
		w.SetBy, _ = json.Marshal(info.SetBy) // a string always marshals
	}
	if !info.SetAt.IsZero() {
		w.SetAt, _ = json.Marshal(info.SetAt.UTC().Format(time.RFC3339Nano))
	}
	if p.Timeout > 0 {
		w.Timeout = p.Timeout.String()
	}
	if r := p.Retry; r.MaxAttempts > 1 {
		w.Retry = &wireRetry{MaxAttempts: r.MaxAttempts, Codes: r.Codes, BackoffBase: r.BackoffBase.String(), BackoffMax: r.BackoffMax.String()}
	}
	if o := p.Outlier; o.FailurePercent > 0 {
		w.Outlier = &wireOutlier{FailurePercent: o.FailurePercent, MinRequests: o.MinRequests,
			BaseEjection: o.BaseEjection.String(), MaxEjectedPercent: o.MaxEjectedPercent}
	}
	return json.Marshal(w)
}

// UnmarshalPolicy decodes and validates a policy value. Unknown fields
// are ignored, and so are who set it and when (see UnmarshalPolicyInfo):
// a bad setBy or setAt does not make a client drop the policy. Errors
// match ErrMalformedValue, ErrUnsupportedVersion or ErrInvalidInstance (a
// *FieldError), as Unmarshal's do.
func UnmarshalPolicy(data []byte) (Policy, error) {
	_, p, err := unmarshalPolicy(data)
	return p, err
}

// UnmarshalPolicyInfo is UnmarshalPolicy with who set the policy and when,
// if the value records them. A setBy that PolicyInfo.Validate refuses, or a
// setAt that is not an RFC 3339 time, is left out (empty), as clients
// ignore both: a view of the policy shows what clients apply.
func UnmarshalPolicyInfo(data []byte) (PolicyInfo, error) {
	w, p, err := unmarshalPolicy(data)
	if err != nil {
		return PolicyInfo{}, err
	}
	info := PolicyInfo{Policy: p}
	var by, at string
	if json.Unmarshal(w.SetBy, &by) == nil && (PolicyInfo{SetBy: by}).Validate() == nil {
		info.SetBy = by
	}
	if json.Unmarshal(w.SetAt, &at) == nil {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			info.SetAt = t
		}
	}
	return info, nil
}

// unmarshalPolicy decodes data and validates and normalizes its policy.
func unmarshalPolicy(data []byte) (wirePolicy, Policy, error) {
	var w wirePolicy
	if err := json.Unmarshal(data, &w); err != nil {
		return w, Policy{}, fmt.Errorf("%w: policy: %v", ErrMalformedValue, err)
	}
	if w.V != SchemaVersion {
		return w, Policy{}, fmt.Errorf("%w: policy has v=%d, this code reads v=%d", ErrUnsupportedVersion, w.V, SchemaVersion)
	}
	p := Policy{MaxConcurrent: w.MaxConcurrent, AffinityHeader: w.AffinityHeader}
	var err error
	parse := func(field, s string) time.Duration {
		if s == "" || err != nil {
			return 0
		}
		d, e := time.ParseDuration(s)
		if e != nil {
			err = fmt.Errorf("%w: policy: %s: %q is not a duration", ErrMalformedValue, field, s)
		}
		return d
	}
	p.Timeout = parse("timeout", w.Timeout)
	if r := w.Retry; r != nil {
		p.Retry = RetryPolicy{MaxAttempts: r.MaxAttempts, Codes: r.Codes,
			BackoffBase: parse("retry.backoffBase", r.BackoffBase), BackoffMax: parse("retry.backoffMax", r.BackoffMax)}
	}
	if o := w.Outlier; o != nil {
		p.Outlier = OutlierPolicy{FailurePercent: o.FailurePercent, MinRequests: o.MinRequests,
			BaseEjection: parse("outlier.baseEjection", o.BaseEjection), MaxEjectedPercent: o.MaxEjectedPercent}
	}
	if err != nil {
		return w, Policy{}, err
	}
	if err := p.Validate(); err != nil {
		return w, Policy{}, err
	}
	return w, p.Normalize(), nil
}

// PolicySource follows the policies of services; a backend that stores
// them implements it (registry/etcd's Policies) and the resolver reads it
// (resolver.WithPolicies).
type PolicySource interface {
	// WatchPolicy follows service's policy until ctx ends and returns at
	// once. The channel receives the policy when it is first read and
	// after each change, the zero Policy for none; it coalesces (a slow
	// reader gets the latest) and is closed after ctx ends.
	WatchPolicy(ctx context.Context, service string) <-chan Policy
}
