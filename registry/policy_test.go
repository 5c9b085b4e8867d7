package registry_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// retrying returns a policy that retries Unavailable calls n times in all.
func retrying(n int) registry.Policy {
	return registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: n, Codes: []string{"UNAVAILABLE"}}}
}

// ejecting returns a policy that ejects endpoints failing pct % of calls.
func ejecting(pct int) registry.Policy {
	return registry.Policy{Outlier: registry.OutlierPolicy{FailurePercent: pct}}
}

// Each field's values just outside its range are refused with a
// *FieldError naming the field (as "muster policy set" spells it), and its
// values at the edges are accepted.
func TestPolicyValidate(t *testing.T) {
	with := func(p registry.Policy, edit func(*registry.Policy)) registry.Policy {
		edit(&p)
		return p
	}
	cases := []struct {
		name  string
		p     registry.Policy
		field string // "": valid
	}{
		{"zero", registry.Policy{}, ""},
		{"timeout 1ms", registry.Policy{Timeout: time.Millisecond}, ""},
		{"timeout 1h", registry.Policy{Timeout: time.Hour}, ""},
		{"timeout 999µs", registry.Policy{Timeout: 999 * time.Microsecond}, "timeout"},
		{"timeout over 1h", registry.Policy{Timeout: time.Hour + time.Millisecond}, "timeout"},
		{"timeout negative", registry.Policy{Timeout: -time.Second}, "timeout"},

		{"maxAttempts 1 alone", registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 1}}, ""},
		{"maxAttempts 2", retrying(2), ""},
		{"maxAttempts at gRPC's cap", retrying(registry.MaxRetryAttempts), ""},
		{"maxAttempts over gRPC's cap", retrying(registry.MaxRetryAttempts + 1), "retry.maxAttempts"},
		{"maxAttempts negative", registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: -1}}, "retry.maxAttempts"},
		{"codes without retries", registry.Policy{Retry: registry.RetryPolicy{Codes: []string{"UNAVAILABLE"}}}, "retry.maxAttempts"},
		{"backoff without retries", registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 1, BackoffBase: time.Second}}, "retry.maxAttempts"},
		{"retries without codes", registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2}}, "retry.codes"},
		{"code OK", with(retrying(2), func(p *registry.Policy) { p.Retry.Codes = []string{"OK"} }), "retry.codes"},
		{"unknown code", with(retrying(2), func(p *registry.Policy) { p.Retry.Codes = []string{"UNAVAILABLE", "SLOW"} }), "retry.codes"},
		{"codes in lower case", with(retrying(2), func(p *registry.Policy) { p.Retry.Codes = []string{"unavailable", "Resource_Exhausted"} }), ""},
		{"every retryable code", with(retrying(3), func(p *registry.Policy) { p.Retry.Codes = registry.RetryableCodes }), ""},
		{"backoffBase 1ms", with(retrying(2), func(p *registry.Policy) { p.Retry.BackoffBase = time.Millisecond }), ""},
		{"backoffBase 1m", with(retrying(2), func(p *registry.Policy) { p.Retry.BackoffBase = time.Minute }), ""},
		{"backoffBase under 1ms", with(retrying(2), func(p *registry.Policy) { p.Retry.BackoffBase = time.Microsecond }), "retry.backoffBase"},
		{"backoffBase over 1m", with(retrying(2), func(p *registry.Policy) { p.Retry.BackoffBase = time.Minute + 1 }), "retry.backoffBase"},
		{"backoffBase negative", with(retrying(2), func(p *registry.Policy) { p.Retry.BackoffBase = -time.Second }), "retry.backoffBase"},
		{"backoffMax equal to base", with(retrying(2), func(p *registry.Policy) {
			p.Retry.BackoffBase, p.Retry.BackoffMax = 200*time.Millisecond, 200*time.Millisecond
		}), ""},
		{"backoffMax 5m", with(retrying(2), func(p *registry.Policy) { p.Retry.BackoffMax = 5 * time.Minute }), ""},
		{"backoffMax under base", with(retrying(2), func(p *registry.Policy) {
			p.Retry.BackoffBase, p.Retry.BackoffMax = 200*time.Millisecond, 199*time.Millisecond
		}), "retry.backoffMax"},
		{"backoffMax over 5m", with(retrying(2), func(p *registry.Policy) { p.Retry.BackoffMax = 5*time.Minute + 1 }), "retry.backoffMax"},

		{"failurePercent 1", ejecting(1), ""},
		{"failurePercent 100", ejecting(100), ""},
		{"failurePercent 101", ejecting(101), "outlier.failurePercent"},
		{"failurePercent negative", ejecting(-1), "outlier.failurePercent"},
		{"outlier fields without failurePercent", registry.Policy{Outlier: registry.OutlierPolicy{MinRequests: 5}}, "outlier.failurePercent"},
		{"ejection without failurePercent", registry.Policy{Outlier: registry.OutlierPolicy{BaseEjection: time.Minute}}, "outlier.failurePercent"},
		{"minRequests 1", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MinRequests = 1 }), ""},
		{"minRequests 1000000", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MinRequests = 1_000_000 }), ""},
		{"minRequests over 1000000", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MinRequests = 1_000_001 }), "outlier.minRequests"},
		{"minRequests negative", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MinRequests = -1 }), "outlier.minRequests"},
		{"baseEjection 1s", with(ejecting(10), func(p *registry.Policy) { p.Outlier.BaseEjection = time.Second }), ""},
		{"baseEjection 1h", with(ejecting(10), func(p *registry.Policy) { p.Outlier.BaseEjection = time.Hour }), ""},
		{"baseEjection under 1s", with(ejecting(10), func(p *registry.Policy) { p.Outlier.BaseEjection = 999 * time.Millisecond }), "outlier.baseEjection"},
		{"baseEjection over 1h", with(ejecting(10), func(p *registry.Policy) { p.Outlier.BaseEjection = time.Hour + 1 }), "outlier.baseEjection"},
		{"maxEjectedPercent 1", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MaxEjectedPercent = 1 }), ""},
		{"maxEjectedPercent 100", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MaxEjectedPercent = 100 }), ""},
		{"maxEjectedPercent 101", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MaxEjectedPercent = 101 }), "outlier.maxEjectedPercent"},
		{"maxEjectedPercent negative", with(ejecting(10), func(p *registry.Policy) { p.Outlier.MaxEjectedPercent = -1 }), "outlier.maxEjectedPercent"},

		{"maxConcurrent 1", registry.Policy{MaxConcurrent: 1}, ""},
		{"maxConcurrent at its limit", registry.Policy{MaxConcurrent: registry.MaxConcurrentLimit}, ""},
		{"maxConcurrent over its limit", registry.Policy{MaxConcurrent: registry.MaxConcurrentLimit + 1}, "maxConcurrent"},
		{"maxConcurrent negative", registry.Policy{MaxConcurrent: -1}, "maxConcurrent"},

		{"affinityHeader", registry.Policy{AffinityHeader: "x-user_id.v2"}, ""},
		{"affinityHeader of 128 bytes", registry.Policy{AffinityHeader: strings.Repeat("h", 128)}, ""},
		{"affinityHeader of 129 bytes", registry.Policy{AffinityHeader: strings.Repeat("h", 129)}, "affinityHeader"},
		{"affinityHeader in upper case", registry.Policy{AffinityHeader: "X-User"}, "affinityHeader"},
		{"affinityHeader with a space", registry.Policy{AffinityHeader: "x user"}, "affinityHeader"},
		{"affinityHeader reserved by gRPC", registry.Policy{AffinityHeader: "grpc-timeout"}, "affinityHeader"},
		{"affinityHeader a pseudo-header", registry.Policy{AffinityHeader: ":authority"}, "affinityHeader"},

		{"everything", registry.Policy{
			Timeout: 800 * time.Millisecond,
			Retry: registry.RetryPolicy{MaxAttempts: 3, Codes: []string{"UNAVAILABLE", "RESOURCE_EXHAUSTED"},
				BackoffBase: 50 * time.Millisecond, BackoffMax: 2 * time.Second},
			Outlier: registry.OutlierPolicy{FailurePercent: 50, MinRequests: 20, BaseEjection: 10 * time.Second,
				MaxEjectedPercent: 30},
			MaxConcurrent: 1000, AffinityHeader: "x-user",
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tc.p, err)
				}
				return
			}
			var fe *registry.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate(%+v) = %v, want a *FieldError", tc.p, err)
			}
			if fe.Field != tc.field {
				t.Fatalf("Validate(%+v) names %q (%v), want %q", tc.p, fe.Field, err, tc.field)
			}
			if !errors.Is(err, registry.ErrInvalidInstance) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not match ErrInvalidInstance or does not name %q", err, tc.field)
			}
			if _, merr := registry.MarshalPolicy(tc.p); !errors.As(merr, &fe) || fe.Field != tc.field {
				t.Fatalf("MarshalPolicy(%+v) = %v, want the error of Validate", tc.p, merr)
			}
		})
	}
}

// A range error says the range, so an operator need not look it up.
func TestPolicyValidateSaysTheRange(t *testing.T) {
	for _, tc := range []struct {
		p    registry.Policy
		want string
	}{
		{registry.Policy{Timeout: 2 * time.Hour}, "1ms..1h0m0s"},
		{retrying(9), "0..5"},
		{ejecting(200), "0..100"},
		{registry.Policy{MaxConcurrent: -1}, "0..1000000"},
		{registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2}}, "UNAVAILABLE"},
	} {
		if err := tc.p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want a message with %q", tc.p, err, tc.want)
		}
	}
}

func TestPolicyNormalizeAndIsZero(t *testing.T) {
	if !(registry.Policy{}).IsZero() || !(registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 1}}).IsZero() {
		t.Fatal("a policy that sets nothing is not IsZero")
	}
	for _, p := range []registry.Policy{{Timeout: time.Second}, retrying(2), ejecting(5), {MaxConcurrent: 1}, {AffinityHeader: "x-a"}} {
		if p.IsZero() {
			t.Errorf("%+v is IsZero", p)
		}
	}
	codes := []string{"unavailable"}
	p := registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: codes, BackoffBase: 3 * time.Second}}.Normalize()
	if codes[0] != "unavailable" {
		t.Fatal("Normalize changed its argument's codes")
	}
	if want := (registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}, BackoffBase: 3 * time.Second, BackoffMax: 3 * time.Second}); !reflect.DeepEqual(p.Retry, want) {
		t.Fatalf("Normalize: retry %+v, want %+v (backoffMax raised to the base)", p.Retry, want)
	}
	// A code listed again, in any case, is kept once: a valid policy's
	// stored value has a bound whatever it is given.
	repeated := make([]string, 0, 1001)
	for range 500 {
		repeated = append(repeated, "unavailable", "UNAVAILABLE")
	}
	repeated = append(repeated, "Internal")
	if got := (registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: repeated}}).Normalize().Retry.Codes; !reflect.DeepEqual(got, []string{"UNAVAILABLE", "INTERNAL"}) {
		t.Fatalf("Normalize of 1,001 codes, two distinct: %q; want [UNAVAILABLE INTERNAL]", got)
	}
	if got := (registry.Policy{}).Normalize(); !reflect.DeepEqual(got.Outlier, registry.OutlierPolicy{}) || got.Retry.BackoffBase != 0 {
		t.Fatalf("Normalize of the zero policy filled defaults: %+v", got)
	}
	if got := (registry.Policy{}).Affinity(); got != registry.DefaultAffinityHeader {
		t.Fatalf("Affinity() = %q, want %q", got, registry.DefaultAffinityHeader)
	}
	if got := (registry.Policy{AffinityHeader: "x-a"}).Affinity(); got != "x-a" {
		t.Fatalf("Affinity() = %q, want x-a", got)
	}
}

func TestPolicyKey(t *testing.T) {
	for prefix, want := range map[string]string{
		registry.DefaultPrefix: "/muster/services.policy/user",
		"/p/":                  "/p.policy/user",
	} {
		if got := registry.PolicyKey(prefix, "user"); got != want {
			t.Errorf("PolicyKey(%q, user) = %q, want %q", prefix, got, want)
		}
	}
	if k := registry.PolicyKey(registry.DefaultPrefix, "user"); strings.HasPrefix(k, registry.DefaultPrefix+"/") {
		t.Errorf("PolicyKey %q is inside the instances' range", k)
	}
}

// A policy survives Marshal and Unmarshal, with the defaults of the fields
// it uses filled in, and encodes as documented.
func TestPolicyRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		in   registry.Policy
		want registry.Policy // after the round trip
		json string          // "": not checked
	}{
		{"zero", registry.Policy{}, registry.Policy{}, `{"v":1}`},
		{"timeout", registry.Policy{Timeout: 800 * time.Millisecond}, registry.Policy{Timeout: 800 * time.Millisecond}, `{"v":1,"timeout":"800ms"}`},
		{"retry with defaults",
			registry.Policy{Timeout: 800 * time.Millisecond, Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"unavailable"}}},
			registry.Policy{Timeout: 800 * time.Millisecond, Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"},
				BackoffBase: registry.DefaultRetryBackoffBase, BackoffMax: registry.DefaultRetryBackoffMax}},
			`{"v":1,"timeout":"800ms","retry":{"maxAttempts":2,"codes":["UNAVAILABLE"],"backoffBase":"100ms","backoffMax":"1s"}}`},
		{"outlier with defaults", ejecting(25),
			registry.Policy{Outlier: registry.OutlierPolicy{FailurePercent: 25, MinRequests: registry.DefaultOutlierMinRequests,
				BaseEjection: registry.DefaultOutlierBaseEjection, MaxEjectedPercent: registry.DefaultOutlierMaxEjectedPercent}},
			`{"v":1,"outlier":{"failurePercent":25,"minRequests":10,"baseEjection":"30s","maxEjectedPercent":50}}`},
		{"cap and header", registry.Policy{MaxConcurrent: 100, AffinityHeader: "x-user"}, registry.Policy{MaxConcurrent: 100, AffinityHeader: "x-user"},
			`{"v":1,"maxConcurrent":100,"affinityHeader":"x-user"}`},
		{"everything set", full(), full(), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := registry.MarshalPolicy(tc.in)
			if err != nil {
				t.Fatalf("MarshalPolicy(%+v): %v", tc.in, err)
			}
			if tc.json != "" && string(data) != tc.json {
				t.Fatalf("MarshalPolicy(%+v) = %s, want %s", tc.in, data, tc.json)
			}
			got, err := registry.UnmarshalPolicy(data)
			if err != nil {
				t.Fatalf("UnmarshalPolicy(%s): %v", data, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("round trip of %+v gives\n %+v, want\n %+v", tc.in, got, tc.want)
			}
		})
	}
}

// full is a policy that sets every field.
func full() registry.Policy {
	return registry.Policy{
		Timeout: 1500 * time.Millisecond,
		Retry: registry.RetryPolicy{MaxAttempts: 4, Codes: []string{"UNAVAILABLE", "DEADLINE_EXCEEDED"},
			BackoffBase: 20 * time.Millisecond, BackoffMax: 400 * time.Millisecond},
		Outlier: registry.OutlierPolicy{FailurePercent: 60, MinRequests: 7, BaseEjection: 2 * time.Minute,
			MaxEjectedPercent: 20},
		MaxConcurrent:  5000,
		AffinityHeader: "x-tenant",
	}
}

func TestUnmarshalPolicyErrors(t *testing.T) {
	for value, want := range map[string]error{
		``:                               registry.ErrMalformedValue,
		`nope`:                           registry.ErrMalformedValue,
		`[]`:                             registry.ErrMalformedValue,
		`{"v":1,"timeout":5}`:            registry.ErrMalformedValue,
		`{"v":1,"maxConcurrent":"many"}`: registry.ErrMalformedValue,
		`{"v":1,"timeout":"soon"}`:       registry.ErrMalformedValue,
		`{"v":1,"retry":{"maxAttempts":2,"codes":["UNAVAILABLE"],"backoffBase":"fast"}}`: registry.ErrMalformedValue,
		`{"v":1,"outlier":{"failurePercent":5,"baseEjection":"30"}}`:                     registry.ErrMalformedValue,
		`{"v":2,"timeout":"1s"}`:                           registry.ErrUnsupportedVersion,
		`{"timeout":"1s"}`:                                 registry.ErrUnsupportedVersion,
		`{"v":1,"timeout":"2h"}`:                           registry.ErrInvalidInstance,
		`{"v":1,"retry":{"maxAttempts":2}}`:                registry.ErrInvalidInstance,
		`{"v":1,"retry":{"maxAttempts":2,"codes":["OK"]}}`: registry.ErrInvalidInstance,
		`{"v":1,"outlier":{"failurePercent":101}}`:         registry.ErrInvalidInstance,
		`{"v":1,"maxConcurrent":-1}`:                       registry.ErrInvalidInstance,
		`{"v":1,"affinityHeader":"grpc-x"}`:                registry.ErrInvalidInstance,
		`{"v":1,"retry":{"maxAttempts":2,"codes":["UNAVAILABLE"],"backoffBase":"2s","backoffMax":"1s"}}`: registry.ErrInvalidInstance,
	} {
		p, err := registry.UnmarshalPolicy([]byte(value))
		if !errors.Is(err, want) {
			t.Errorf("UnmarshalPolicy(%s) = %v, want %v", value, err, want)
		}
		if !reflect.DeepEqual(p, registry.Policy{}) {
			t.Errorf("UnmarshalPolicy(%s) returned %+v with its error, want the zero Policy", value, p)
		}
	}
	// The error names the field with the bad duration.
	if _, err := registry.UnmarshalPolicy([]byte(`{"v":1,"outlier":{"failurePercent":5,"baseEjection":"30"}}`)); err == nil ||
		!strings.Contains(err.Error(), "outlier.baseEjection") {
		t.Errorf("a bad baseEjection gives %v, want it named", err)
	}
}

// samePolicy reports whether a and b mean the same policy: equal fields,
// except that no codes are no codes whether nil or empty, and 0 or 1 attempts
// are both no retries (MarshalPolicy writes neither).
func samePolicy(a, b registry.Policy) bool {
	canon := func(p registry.Policy) registry.Policy {
		if len(p.Retry.Codes) == 0 {
			p.Retry.Codes = nil
		}
		if p.Retry.MaxAttempts == 1 {
			p.Retry.MaxAttempts = 0
		}
		return p
	}
	a, b = canon(a), canon(b)
	return slices.Equal(a.Retry.Codes, b.Retry.Codes) && reflect.DeepEqual(a, b)
}

// FuzzUnmarshalPolicy feeds arbitrary bytes to the policy codec: it must
// never panic, every rejection must be one of the documented errors, and a
// value it accepts must be marshalled again into a value that decodes to
// the same policy, and encodes to the same bytes.
func FuzzUnmarshalPolicy(f *testing.F) {
	for _, seed := range []string{
		`{"v":1}`,
		`{"v":1,"timeout":"800ms","retry":{"maxAttempts":2,"codes":["UNAVAILABLE"],"backoffBase":"100ms","backoffMax":"1s"}}`,
		`{"v":1,"retry":{"maxAttempts":3,"codes":["unavailable","aborted"]}}`,
		`{"v":1,"retry":{"maxAttempts":1,"codes":[]}}`,
		`{"v":1,"outlier":{"failurePercent":25,"minRequests":10,"baseEjection":"30s","maxEjectedPercent":50}}`,
		`{"v":1,"outlier":{"failurePercent":25}}`,
		`{"v":1,"maxConcurrent":100,"affinityHeader":"x-user"}`,
		`{"v":1,"timeout":"1h0m0.001s"}`,
		`{"v":1,"timeout":"1.5s"}`,
		`{"v":2}`, `{"v":1,"timeout":"x"}`, `not json`, `{}`, `null`, "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := registry.UnmarshalPolicy(data)
		if err != nil {
			if !errors.Is(err, registry.ErrMalformedValue) && !errors.Is(err, registry.ErrUnsupportedVersion) && !errors.Is(err, registry.ErrInvalidInstance) {
				t.Fatalf("UnmarshalPolicy(%q) = %v, not a documented error", data, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("UnmarshalPolicy(%q) accepted %+v, which Validate refuses: %v", data, p, err)
		}
		again, err := registry.MarshalPolicy(p)
		if err != nil {
			t.Fatalf("MarshalPolicy of an accepted value %q (%+v): %v", data, p, err)
		}
		back, err := registry.UnmarshalPolicy(again)
		if err != nil {
			t.Fatalf("UnmarshalPolicy of re-marshalled %q: %v", again, err)
		}
		if !samePolicy(back, p) {
			t.Fatalf("round trip of %q through %s changed the policy:\n in %+v\nout %+v", data, again, p, back)
		}
		if third, err := registry.MarshalPolicy(back); err != nil || string(third) != string(again) {
			t.Fatalf("MarshalPolicy is not stable: %s, then %s (%v)", again, third, err)
		}
	})
}
