package registry

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PolicyField is one field of a Policy as operators name, set, show and
// read about it: "muster policy" and the console take FIELD=VALUE
// assignments of these fields (see PolicyEdit).
type PolicyField struct {
	// Name is the field's name in the JSON value, in Validate's errors
	// and in an assignment: "timeout", "retry.maxAttempts".
	Name string
	// Range is the values the field takes, as help texts and errors say
	// it: "1ms..1h".
	Range string
	// About says what the field means, Default what it is when not set.
	About, Default string

	// set parses v into p, "" resetting the field to zero; an error says
	// why v is not a value of the field.
	set func(p *Policy, v string) error
	// show renders the field of p; "" when it is not set.
	show func(p Policy) string
}

// Value returns the field of p as an assignment spells it ("800ms",
// "UNAVAILABLE,ABORTED"), or "" when p does not set it.
func (f PolicyField) Value(p Policy) string { return f.show(p) }

// PolicyFields returns the fields of a Policy in the order they are shown,
// a new slice on each call.
func PolicyFields() []PolicyField {
	return []PolicyField{
		durationField("timeout", "1ms..1h", "the deadline of each call whose caller sets none shorter",
			"none (0)", func(p *Policy) *time.Duration { return &p.Timeout }),
		intField("retry.maxAttempts", fmt.Sprintf("0..%d", MaxRetryAttempts),
			"the attempts of a call, the first one counted (2 retries once)",
			"0, no retries", func(p *Policy) *int { return &p.Retry.MaxAttempts }),
		{
			Name:  "retry.codes",
			Range: "gRPC status code names but OK, comma-separated, case-insensitive",
			About: "the status codes whose calls are retried, such as " +
				"UNAVAILABLE,RESOURCE_EXHAUSTED; at least one is needed to retry",
			Default: "none",
			set: func(p *Policy, v string) error {
				p.Retry.Codes = nil
				for _, c := range strings.Split(v, ",") {
					if c = strings.TrimSpace(c); c != "" {
						p.Retry.Codes = append(p.Retry.Codes, strings.ToUpper(c))
					}
				}
				return nil
			},
			show: func(p Policy) string { return strings.Join(p.Retry.Codes, ",") },
		},
		durationField("retry.backoffBase", "1ms..1m", "the first retry's backoff, randomised and doubled on each retry",
			DefaultRetryBackoffBase.String()+" when retrying",
			func(p *Policy) *time.Duration { return &p.Retry.BackoffBase }),
		durationField("retry.backoffMax", "retry.backoffBase..5m", "the cap of the backoff",
			DefaultRetryBackoffMax.String()+" (or retry.backoffBase if longer) when retrying",
			func(p *Policy) *time.Duration { return &p.Retry.BackoffMax }),
		intField("outlier.failurePercent", "0..100",
			"an endpoint whose share of failed calls over an interval exceeds it is ejected",
			"0, no ejection by the policy", func(p *Policy) *int { return &p.Outlier.FailurePercent }),
		intField("outlier.minRequests", "1..1000000", "the calls an endpoint needs in an interval to be judged",
			strconv.Itoa(DefaultOutlierMinRequests)+" when ejecting",
			func(p *Policy) *int { return &p.Outlier.MinRequests }),
		durationField("outlier.baseEjection", "1s..1h", "the first ejection's length, longer on each in a row",
			DefaultOutlierBaseEjection.String()+" when ejecting",
			func(p *Policy) *time.Duration { return &p.Outlier.BaseEjection }),
		intField("outlier.maxEjectedPercent", "1..100", "the share of the endpoints ejected at once, at most",
			strconv.Itoa(DefaultOutlierMaxEjectedPercent)+" when ejecting",
			func(p *Policy) *int { return &p.Outlier.MaxEjectedPercent }),
		intField("maxConcurrent", fmt.Sprintf("0..%d", MaxConcurrentLimit),
			"a client's calls in flight to the service; a call over it fails at once with Unavailable",
			"0, no cap", func(p *Policy) *int { return &p.MaxConcurrent }),
		{
			Name: "affinityHeader",
			Range: "a header name of lower case letters, digits, '-', '_' and '.', " +
				"at most 128 bytes, not starting with grpc-",
			About: "the request header whose value keeps calls on one endpoint (ring hash) " +
				"and keys canaries",
			Default: DefaultAffinityHeader,
			set:     func(p *Policy, v string) error { p.AffinityHeader = v; return nil },
			show:    func(p Policy) string { return p.AffinityHeader },
		},
	}
}

func durationField(name, rng, about, dflt string, field func(*Policy) *time.Duration) PolicyField {
	return PolicyField{
		Name: name, Range: rng, About: about, Default: dflt,
		set: func(p *Policy, v string) error {
			if v == "" {
				*field(p) = 0
				return nil
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%q is not a duration (such as 800ms or 2s)", v)
			}
			*field(p) = d
			return nil
		},
		show: func(p Policy) string {
			if d := *field(&p); d != 0 {
				return d.String()
			}
			return ""
		},
	}
}

func intField(name, rng, about, dflt string, field func(*Policy) *int) PolicyField {
	return PolicyField{
		Name: name, Range: rng, About: about, Default: dflt,
		set: func(p *Policy, v string) error {
			if v == "" {
				*field(p) = 0
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
			*field(p) = n
			return nil
		},
		show: func(p Policy) string {
			if n := *field(&p); n != 0 {
				return strconv.Itoa(n)
			}
			return ""
		},
	}
}

// PolicyEditError is the error of ParsePolicyEdit: an assignment that is
// not FIELD=VALUE, names no field of PolicyFields, repeats a field, or
// gives a value its field does not parse. It matches ErrInvalidInstance,
// as the *FieldError of PolicyEdit.Apply does.
type PolicyEditError struct {
	// Field is the field the assignment names; "" when it names none.
	Field string
	// Reason says what is wrong, naming the assignment or the field and,
	// for a value that does not parse, the field's range:
	// `timeout: "soon" is not a duration (such as 800ms or 2s); want 1ms..1h`.
	Reason string
}

// Error implements error.
func (e *PolicyEditError) Error() string { return "registry: policy: " + e.Reason }

// Is makes a PolicyEditError match ErrInvalidInstance.
func (e *PolicyEditError) Is(target error) bool { return target == ErrInvalidInstance }

// PolicyEdit is a list of FIELD=VALUE assignments to merge into a stored
// Policy, as "muster policy set" and the console take them. Its zero value
// assigns nothing.
type PolicyEdit struct {
	assignments []assignment
}

type assignment struct {
	field PolicyField
	value string
}

// ParsePolicyEdit parses assignments, each FIELD=VALUE with FIELD one of
// PolicyFields' names; FIELD= (an empty value) resets the field. Each value
// is parsed as its field's type (a duration, a whole number, a list of
// codes, a header); ranges are checked by Apply, against the policy they
// make. An error is a *PolicyEditError; no assignment at all is one too.
func ParsePolicyEdit(assignments []string) (PolicyEdit, error) {
	if len(assignments) == 0 {
		return PolicyEdit{}, &PolicyEditError{Reason: "no FIELD=VALUE assignment"}
	}
	fields := PolicyFields()
	var e PolicyEdit
	for _, a := range assignments {
		name, value, ok := strings.Cut(a, "=")
		if !ok {
			return PolicyEdit{}, &PolicyEditError{Reason: fmt.Sprintf("%q: want FIELD=VALUE (FIELD= resets the field)", a)}
		}
		f, err := lookupPolicyField(fields, name)
		if err != nil {
			return PolicyEdit{}, err
		}
		if e.Sets(name) {
			return PolicyEdit{}, &PolicyEditError{Field: name, Reason: name + " is given twice"}
		}
		if err := f.set(&Policy{}, value); err != nil {
			return PolicyEdit{}, &PolicyEditError{Field: name, Reason: fmt.Sprintf("%s: %v; want %s", name, err, f.Range)}
		}
		e.assignments = append(e.assignments, assignment{field: f, value: value})
	}
	return e, nil
}

// lookupPolicyField returns the field of fields named name, or an error
// listing the names (or the one that differs from name only in case).
func lookupPolicyField(fields []PolicyField, name string) (PolicyField, error) {
	names := make([]string, len(fields))
	for i, f := range fields {
		if f.Name == name {
			return f, nil
		}
		if strings.EqualFold(f.Name, name) {
			return PolicyField{}, &PolicyEditError{Reason: fmt.Sprintf("unknown field %q; did you mean %s?", name, f.Name)}
		}
		names[i] = f.Name
	}
	return PolicyField{}, &PolicyEditError{Reason: fmt.Sprintf("unknown field %q; want one of %s", name, strings.Join(names, ", "))}
}

// Sets reports whether e assigns the field name.
func (e PolicyEdit) Sets(name string) bool {
	return slices.ContainsFunc(e.assignments, func(a assignment) bool { return a.field.Name == name })
}

// setsOther reports whether e assigns a field whose name starts with
// group, other than except.
func (e PolicyEdit) setsOther(group, except string) bool {
	return slices.ContainsFunc(e.assignments, func(a assignment) bool {
		return strings.HasPrefix(a.field.Name, group) && a.field.Name != except
	})
}

// Apply returns p with e's assignments merged in, normalized: the fields e
// does not name keep their value. Turning retries off (retry.maxAttempts
// empty, 0 or 1) also resets the other retry fields, and turning ejection
// off (outlier.failurePercent empty or 0) the other outlier fields, unless
// e sets them too: they are often the defaults stored with the policy. A
// result out of range is Validate's *FieldError, naming the field and its
// range. A result that sets nothing (IsZero) is no error: the caller
// removes the policy rather than store it.
func (e PolicyEdit) Apply(p Policy) (Policy, error) {
	p.Retry.Codes = slices.Clone(p.Retry.Codes)
	for _, a := range e.assignments {
		_ = a.field.set(&p, a.value) // parsed by ParsePolicyEdit
	}
	if e.Sets("retry.maxAttempts") && p.Retry.MaxAttempts >= 0 && p.Retry.MaxAttempts <= 1 &&
		!e.setsOther("retry.", "retry.maxAttempts") {
		p.Retry = RetryPolicy{}
	}
	if e.Sets("outlier.failurePercent") && p.Outlier.FailurePercent == 0 &&
		!e.setsOther("outlier.", "outlier.failurePercent") {
		p.Outlier = OutlierPolicy{}
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p.Normalize(), nil
}

// Describe returns the fields p sets as "timeout 800ms", in the order of
// PolicyFields.
func (p Policy) Describe() []string {
	var out []string
	for _, f := range PolicyFields() {
		if v := f.show(p); v != "" {
			out = append(out, f.Name+" "+v)
		}
	}
	return out
}

// Equal reports whether p and q are the same policy once normalized.
func (p Policy) Equal(q Policy) bool {
	p, q = p.Normalize(), q.Normalize()
	pr, qr := p.Retry, q.Retry
	return p.Timeout == q.Timeout && pr.MaxAttempts == qr.MaxAttempts && slices.Equal(pr.Codes, qr.Codes) &&
		pr.BackoffBase == qr.BackoffBase && pr.BackoffMax == qr.BackoffMax && p.Outlier == q.Outlier &&
		p.MaxConcurrent == q.MaxConcurrent && p.AffinityHeader == q.AffinityHeader
}
