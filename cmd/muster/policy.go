package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// policyField is one field of a registry.Policy as "muster policy" names,
// parses, shows and documents it. The names are those of
// registry.Policy.Validate's errors and of the JSON value.
type policyField struct {
	name string
	// rng is the values the field takes (for the help and the errors),
	// about what it means and dflt what it is when not set (for the help).
	rng, about, dflt string
	// set parses v into p, "" resetting the field to zero; an error says
	// why v is not a value of the field.
	set func(p *registry.Policy, v string) error
	// show renders the field of p; "" when it is not set.
	show func(p registry.Policy) string
}

// policyFields are the fields of "muster policy set", in the order show
// lists them.
var policyFields = []policyField{
	durationField("timeout", "1ms..1h", "the deadline of each call whose caller sets none shorter",
		"none (0)", func(p *registry.Policy) *time.Duration { return &p.Timeout }),
	intField("retry.maxAttempts", fmt.Sprintf("0..%d", registry.MaxRetryAttempts),
		"the attempts of a call, the first one counted (2 retries once)",
		"0, no retries", func(p *registry.Policy) *int { return &p.Retry.MaxAttempts }),
	{
		name: "retry.codes",
		rng:  "gRPC status code names but OK, comma-separated, case-insensitive",
		about: "the status codes whose calls are retried, such as " +
			"UNAVAILABLE,RESOURCE_EXHAUSTED; at least one is needed to retry",
		dflt: "none",
		set: func(p *registry.Policy, v string) error {
			p.Retry.Codes = nil
			for _, c := range strings.Split(v, ",") {
				if c = strings.TrimSpace(c); c != "" {
					p.Retry.Codes = append(p.Retry.Codes, strings.ToUpper(c))
				}
			}
			return nil
		},
		show: func(p registry.Policy) string { return strings.Join(p.Retry.Codes, ",") },
	},
	durationField("retry.backoffBase", "1ms..1m", "the first retry's backoff, randomised and doubled on each retry",
		registry.DefaultRetryBackoffBase.String()+" when retrying",
		func(p *registry.Policy) *time.Duration { return &p.Retry.BackoffBase }),
	durationField("retry.backoffMax", "retry.backoffBase..5m", "the cap of the backoff",
		registry.DefaultRetryBackoffMax.String()+" (or retry.backoffBase if longer) when retrying",
		func(p *registry.Policy) *time.Duration { return &p.Retry.BackoffMax }),
	intField("outlier.failurePercent", "0..100",
		"an endpoint whose share of failed calls over an interval exceeds it is ejected",
		"0, no ejection by the policy", func(p *registry.Policy) *int { return &p.Outlier.FailurePercent }),
	intField("outlier.minRequests", "1..1000000", "the calls an endpoint needs in an interval to be judged",
		strconv.Itoa(registry.DefaultOutlierMinRequests)+" when ejecting",
		func(p *registry.Policy) *int { return &p.Outlier.MinRequests }),
	durationField("outlier.baseEjection", "1s..1h", "the first ejection's length, longer on each in a row",
		registry.DefaultOutlierBaseEjection.String()+" when ejecting",
		func(p *registry.Policy) *time.Duration { return &p.Outlier.BaseEjection }),
	intField("outlier.maxEjectedPercent", "1..100", "the share of the endpoints ejected at once, at most",
		strconv.Itoa(registry.DefaultOutlierMaxEjectedPercent)+" when ejecting",
		func(p *registry.Policy) *int { return &p.Outlier.MaxEjectedPercent }),
	intField("maxConcurrent", fmt.Sprintf("0..%d", registry.MaxConcurrentLimit),
		"a client's calls in flight to the service; a call over it fails at once with Unavailable",
		"0, no cap", func(p *registry.Policy) *int { return &p.MaxConcurrent }),
	{
		name: "affinityHeader",
		rng: "a header name of lower case letters, digits, '-', '_' and '.', " +
			"at most 128 bytes, not starting with grpc-",
		about: "the request header whose value keeps calls on one endpoint (ring hash) " +
			"and keys canaries",
		dflt: registry.DefaultAffinityHeader,
		set:  func(p *registry.Policy, v string) error { p.AffinityHeader = v; return nil },
		show: func(p registry.Policy) string { return p.AffinityHeader },
	},
}

func durationField(name, rng, about, dflt string, field func(*registry.Policy) *time.Duration) policyField {
	return policyField{
		name: name, rng: rng, about: about, dflt: dflt,
		set: func(p *registry.Policy, v string) error {
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
		show: func(p registry.Policy) string {
			if d := *field(&p); d != 0 {
				return d.String()
			}
			return ""
		},
	}
}

func intField(name, rng, about, dflt string, field func(*registry.Policy) *int) policyField {
	return policyField{
		name: name, rng: rng, about: about, dflt: dflt,
		set: func(p *registry.Policy, v string) error {
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
		show: func(p registry.Policy) string {
			if n := *field(&p); n != 0 {
				return strconv.Itoa(n)
			}
			return ""
		},
	}
}

func lookupPolicyField(name string) (policyField, error) {
	names := make([]string, len(policyFields))
	for i, f := range policyFields {
		if f.name == name {
			return f, nil
		}
		if strings.EqualFold(f.name, name) {
			return policyField{}, fmt.Errorf("unknown field %q; did you mean %s?", name, f.name)
		}
		names[i] = f.name
	}
	return policyField{}, fmt.Errorf("unknown field %q; want one of %s", name, strings.Join(names, ", "))
}

// policyLong is the help of "muster policy": what it does, then every
// field with what it takes and its default.
func policyLong() string {
	var b strings.Builder
	b.WriteString(`Policy shows, sets or clears the call policy of a service: each call's
timeout, which failed calls are retried, outlier ejection by failure
percentage, a cap on calls in flight, and the header that keeps calls on one
endpoint. With the service alone, or "show", it prints each field set, one a
line ("no policy" when none is stored); -o json prints the stored value (null
when none).

"set" merges FIELD=VALUE pairs into the stored policy: the fields not named
keep their value, and FIELD= (empty) resets a field to zero. Turning retries
off (retry.maxAttempts empty, 0 or 1) also resets the other retry fields, and
turning ejection off (outlier.failurePercent empty or 0) the other outlier
fields, unless the same command sets them. The defaults of the fields a
policy uses are stored with it. An unknown field, a value that does not parse
or a policy out of range is refused with exit code 2, naming the field and
its range, and nothing is written; a policy left setting nothing is removed.
"clear" removes the policy.

The policy is stored in the registry; clients apply it as the policy documentation (docs/POLICY.md) says.
Its key is <prefix>.policy/<service>, beside the canary, bound to no lease:
it stays until "clear".

Fields:
`)
	for _, f := range policyFields {
		fmt.Fprintf(&b, "  %s\n%s", f.name, wrap("      ", f.rng+": "+f.about+". Default: "+f.dflt+".", 78))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// wrap breaks text into lines of at most width bytes (unless a word is
// longer), each starting with indent and ending with a newline.
func wrap(indent, text string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if line != indent && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}

// policyCmd is what "muster policy" was asked to do.
type policyCmd struct {
	service string
	verb    string // "show", "set" or "clear"
	// pairs are the FIELD=VALUE pairs of set, parsed.
	pairs []policyPair
}

type policyPair struct {
	field policyField
	value string
}

func newPolicyCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "policy <service> [show | set FIELD=VALUE... | clear]",
		Short: "Show, set or clear a service's call policy (timeout, retries, ejection, cap)",
		Long:  policyLong(),
		Example: `  muster policy user
  muster policy user set timeout=800ms retry.maxAttempts=2 retry.codes=unavailable
  muster policy user set outlier.failurePercent=50 maxConcurrent=1000
  muster policy user set timeout=
  muster policy user show -o json
  muster policy user clear`,
		Args: func(cmd *cobra.Command, args []string) error {
			_, err := parsePolicyArgs(cmd, args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			pc, err := parsePolicyArgs(cmd, args)
			if err != nil {
				return err
			}
			return runPolicy(cmd.Context(), g, output, pc, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// parsePolicyArgs checks the command line of "muster policy"; its errors
// are usage errors.
func parsePolicyArgs(cmd *cobra.Command, args []string) (policyCmd, error) {
	if len(args) == 0 {
		return policyCmd{}, usageErrorf("%s needs a service name", cmd.CommandPath())
	}
	if err := registry.ValidateName(args[0]); err != nil {
		var fe *registry.FieldError
		if errors.As(err, &fe) {
			return policyCmd{}, usageErrorf("invalid service name: %s", fe.Reason)
		}
		return policyCmd{}, &usageError{err: err}
	}
	pc := policyCmd{service: args[0], verb: "show"}
	if len(args) > 1 {
		pc.verb = args[1]
	}
	rest := args[min(2, len(args)):]
	switch pc.verb {
	case "show", "clear":
		if len(rest) > 0 {
			return policyCmd{}, usageErrorf("%s %s %s takes no more arguments, got %q", cmd.CommandPath(), pc.service, pc.verb, rest)
		}
	case "set":
		if len(rest) == 0 {
			return policyCmd{}, usageErrorf("%s %s set needs at least one FIELD=VALUE", cmd.CommandPath(), pc.service)
		}
		seen := map[string]bool{}
		for _, arg := range rest {
			name, value, ok := strings.Cut(arg, "=")
			if !ok {
				return policyCmd{}, usageErrorf("%q: want FIELD=VALUE (FIELD= resets the field)", arg)
			}
			f, err := lookupPolicyField(name)
			if err != nil {
				return policyCmd{}, usageErrorf("%v", err)
			}
			if seen[name] {
				return policyCmd{}, usageErrorf("%s is given twice", name)
			}
			seen[name] = true
			if err := f.set(&registry.Policy{}, value); err != nil {
				return policyCmd{}, usageErrorf("%s: %v; want %s", name, err, f.rng)
			}
			pc.pairs = append(pc.pairs, policyPair{field: f, value: value})
		}
	default:
		return policyCmd{}, usageErrorf("%s %s: unknown verb %q; want show, set or clear", cmd.CommandPath(), pc.service, pc.verb)
	}
	return pc, nil
}

// merge returns p with the pairs applied (see policyLong for the rules),
// or a usage error naming the field that makes the result invalid.
func (pc policyCmd) merge(p registry.Policy) (registry.Policy, error) {
	for _, pr := range pc.pairs {
		_ = pr.field.set(&p, pr.value) // parsed by parsePolicyArgs
	}
	// Turning retries or ejection off drops the fields that mean nothing
	// without it (often defaults stored with the policy), unless this
	// command sets them too.
	if pc.names("retry.maxAttempts") && p.Retry.MaxAttempts >= 0 && p.Retry.MaxAttempts <= 1 && !pc.namesOther("retry.", "retry.maxAttempts") {
		p.Retry = registry.RetryPolicy{}
	}
	if pc.names("outlier.failurePercent") && p.Outlier.FailurePercent == 0 && !pc.namesOther("outlier.", "outlier.failurePercent") {
		p.Outlier = registry.OutlierPolicy{}
	}
	if err := p.Validate(); err != nil {
		var fe *registry.FieldError
		if errors.As(err, &fe) {
			return registry.Policy{}, usageErrorf("invalid policy of %s: %s: %s", pc.service, fe.Field, fe.Reason)
		}
		return registry.Policy{}, usageErrorf("invalid policy of %s: %v", pc.service, err)
	}
	return p.Normalize(), nil
}

// names reports whether a pair sets the field name.
func (pc policyCmd) names(name string) bool {
	for _, pr := range pc.pairs {
		if pr.field.name == name {
			return true
		}
	}
	return false
}

// namesOther reports whether a pair sets a field whose name starts with
// group, other than except.
func (pc policyCmd) namesOther(group, except string) bool {
	for _, pr := range pc.pairs {
		if strings.HasPrefix(pr.field.name, group) && pr.field.name != except {
			return true
		}
	}
	return false
}

func runPolicy(ctx context.Context, g *globalOptions, output string, pc policyCmd, stdout, stderr io.Writer) error {
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	opts := []etcd.Option{etcd.WithPrefix(g.prefix), etcd.WithRequestTimeout(g.timeout)}
	service := pc.service
	switch pc.verb {
	case "clear":
		if err := etcd.ClearPolicy(ctx, s.cli, service, opts...); err != nil {
			return g.etcdError(ctx, "clear the policy of "+service, err)
		}
		if output == outputJSON {
			return writeJSON(stdout, nil)
		}
		_, err := fmt.Fprintf(stdout, "%s: policy cleared\n", service)
		return err
	case "set":
		// Read, merge, write: a set running at the same time as another
		// one may undo it (the last write wins).
		p, _, err := etcd.GetPolicy(ctx, s.cli, service, opts...)
		if err != nil {
			return policyReadError(ctx, g, service, err)
		}
		if p, err = pc.merge(p); err != nil {
			return err
		}
		if p.IsZero() {
			if err := etcd.ClearPolicy(ctx, s.cli, service, opts...); err != nil {
				return g.etcdError(ctx, "clear the policy of "+service, err)
			}
		} else if err := etcd.SetPolicy(ctx, s.cli, service, p, opts...); err != nil {
			return g.etcdError(ctx, "set the policy of "+service, err)
		}
		return writePolicy(stdout, output, service, p, !p.IsZero())
	default:
		p, ok, err := etcd.GetPolicy(ctx, s.cli, service, opts...)
		if err != nil {
			return policyReadError(ctx, g, service, err)
		}
		return writePolicy(stdout, output, service, p, ok)
	}
}

// policyReadError is the error of a failed etcd.GetPolicy: a stored value
// that does not decode, or the request's error.
func policyReadError(ctx context.Context, g *globalOptions, service string, err error) error {
	if errors.Is(err, registry.ErrMalformedValue) || errors.Is(err, registry.ErrUnsupportedVersion) ||
		errors.Is(err, registry.ErrInvalidInstance) {
		return fmt.Errorf("the stored policy of %s: %w (\"muster policy %s clear\" removes it)", service, err, service)
	}
	return g.etcdError(ctx, "read the policy of "+service, err)
}

// writePolicy writes the policy p of service (none if !ok): in JSON the
// value as stored (null for none), else each field set on a line, as in
// "timeout 800ms".
func writePolicy(w io.Writer, output, service string, p registry.Policy, ok bool) error {
	if output == outputJSON {
		if !ok {
			return writeJSON(w, nil)
		}
		v, err := registry.MarshalPolicy(p)
		if err != nil {
			return err
		}
		return writeJSON(w, json.RawMessage(v))
	}
	if !ok {
		_, err := fmt.Fprintf(w, "%s: no policy\n", service)
		return err
	}
	var b strings.Builder
	for _, f := range policyFields {
		if v := f.show(p); v != "" {
			fmt.Fprintf(&b, "%s %s\n", f.name, v)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
