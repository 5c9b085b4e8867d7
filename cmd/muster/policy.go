package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/registry"
)

// policyField is a field of registry.PolicyFields under the name the help
// lists it by.
type policyField struct {
	name string
	registry.PolicyField
}

// policyFields yields the fields of "muster policy set", in the order show
// lists them.
func policyFields(yield func(int, policyField) bool) {
	for i, f := range registry.PolicyFields() {
		if !yield(i, policyField{name: f.Name, PolicyField: f}) {
			return
		}
	}
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

"set" records who set the policy and when: the etcd user (--user) or else
the local user, as "alice (command)"; the console records "alice (console)".
Show prints them on stderr after the fields ("set by alice (console) at
2026-12-03T10:20:00Z"), and in JSON they are the stored value's "setBy" and
"setAt". Clients ignore them: a set that changes nothing else changes no
client's behaviour.

The policy is stored in the registry; clients apply it as the policy documentation (docs/POLICY.md) says.
Its key is <prefix>.policy/<service>, beside the canary, bound to no lease:
it stays until "clear".

Every set and clear is also traced: "muster history <service>" shows who
made it, when, from where, and the policy before and after.

Fields:
`)
	for _, f := range policyFields {
		fmt.Fprintf(&b, "  %s\n%s", f.name, wrap("      ", f.Range+": "+f.About+". Default: "+f.Default+".", 78))
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
	// edit is the FIELD=VALUE pairs of set, parsed.
	edit registry.PolicyEdit
}

func newPolicyCmd(g *globalOptions) *cobra.Command {
	var output string
	var t clusterTarget
	cmd := &cobra.Command{
		Use:   "policy <service> [show | set FIELD=VALUE... | clear]",
		Short: "Show, set or clear a service's call policy (timeout, retries, ejection, cap)",
		Long:  policyLong(),
		Example: `  muster policy user
  muster policy user set timeout=800ms retry.maxAttempts=2 retry.codes=unavailable
  muster policy user set outlier.failurePercent=50 maxConcurrent=1000
  muster policy user set timeout=
  muster policy user show -o json
  muster policy user clear
  muster policy user set timeout=800ms --in eu --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
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
			c, err := t.resolve(g)
			if err != nil {
				return err
			}
			return runPolicy(cmd.Context(), c, output, pc, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addOutputFlag(cmd, &output)
	t.add(cmd)
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
		edit, err := registry.ParsePolicyEdit(rest)
		if err != nil {
			var pe *registry.PolicyEditError
			if errors.As(err, &pe) {
				return policyCmd{}, usageErrorf("%s", pe.Reason)
			}
			return policyCmd{}, &usageError{err: err}
		}
		pc.edit = edit
	default:
		return policyCmd{}, usageErrorf("%s %s: unknown verb %q; want show, set or clear", cmd.CommandPath(), pc.service, pc.verb)
	}
	return pc, nil
}

// merge returns p with the pairs applied (see registry.PolicyEdit.Apply
// for the rules), or a usage error naming the field that makes the result
// invalid.
func (pc policyCmd) merge(p registry.Policy) (registry.Policy, error) {
	p, err := pc.edit.Apply(p)
	if err != nil {
		var fe *registry.FieldError
		if errors.As(err, &fe) {
			return registry.Policy{}, usageErrorf("invalid policy of %s: %s: %s", pc.service, fe.Field, fe.Reason)
		}
		return registry.Policy{}, usageErrorf("invalid policy of %s: %v", pc.service, err)
	}
	return p, nil
}

// runPolicy runs "muster policy" on the registry g names.
func runPolicy(ctx context.Context, g *globalOptions, output string, pc policyCmd, stdout, stderr io.Writer) error {
	s, err := g.connect(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	service := pc.service
	switch pc.verb {
	case "clear":
		if err := s.admin.ClearPolicy(ctx, service); err != nil {
			return s.fail(ctx, "clear the policy of "+service, err)
		}
		if output == outputJSON {
			return writeJSON(stdout, nil)
		}
		_, err := fmt.Fprintf(stdout, "%s: policy cleared\n", service)
		return err
	case "set":
		// Read, merge, write: a set running at the same time as another
		// one may undo it (the last write wins).
		info, _, err := s.admin.Policy(ctx, service)
		if err != nil {
			return policyReadError(ctx, s, service, err)
		}
		p, err := pc.merge(info.Policy)
		if err != nil {
			return err
		}
		if p.IsZero() {
			if err := s.admin.ClearPolicy(ctx, service); err != nil {
				return s.fail(ctx, "clear the policy of "+service, err)
			}
			return writePolicy(stdout, stderr, output, service, registry.PolicyInfo{}, false)
		}
		if err := s.admin.SetPolicy(ctx, service, p); err != nil {
			return s.fail(ctx, "set the policy of "+service, err)
		}
		fallthrough // show what is stored now
	default:
		info, ok, err := s.admin.Policy(ctx, service)
		if err != nil {
			return policyReadError(ctx, s, service, err)
		}
		return writePolicy(stdout, stderr, output, service, info, ok)
	}
}

// setter is who "muster policy set" records as setting a policy where
// the registry records that: the command's Actor, as "alice (command)".
func (g *globalOptions) setter() string {
	return g.who() + " (" + registry.SourceCommand + ")"
}

// policyReadError is the error of a failed read of a policy: a stored
// value that does not decode, or the request's error.
func policyReadError(ctx context.Context, s *session, service string, err error) error {
	if badValue(err) {
		return fmt.Errorf("the stored policy of %s: %w (\"muster policy %s clear\" removes it)", service, err, service)
	}
	return s.fail(ctx, "read the policy of "+service, err)
}

// writePolicy writes the stored policy info of service (none if !ok): in
// JSON the value as stored (null for none), else each field set on a line,
// as in "timeout 800ms", and who set it and when on stderr.
func writePolicy(stdout, stderr io.Writer, output, service string, info registry.PolicyInfo, ok bool) error {
	if output == outputJSON {
		if !ok {
			return writeJSON(stdout, nil)
		}
		v, err := registry.MarshalPolicyInfo(info)
		if err != nil {
			return err
		}
		return writeJSON(stdout, json.RawMessage(v))
	}
	if !ok {
		_, err := fmt.Fprintf(stdout, "%s: no policy\n", service)
		return err
	}
	var b strings.Builder
	for _, line := range info.Policy.Describe() {
		b.WriteString(line + "\n")
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return err
	}
	if by := setBy(info); by != "" {
		_, err := fmt.Fprintln(stderr, by)
		return err
	}
	return nil
}

// setBy says who set a policy and when, as "set by alice (console) at
// 2026-12-03T10:20:00Z"; "" when neither is recorded.
func setBy(info registry.PolicyInfo) string {
	var parts []string
	if info.SetBy != "" {
		parts = append(parts, "by "+info.SetBy)
	}
	if !info.SetAt.IsZero() {
		parts = append(parts, "at "+info.SetAt.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return ""
	}
	return "set " + strings.Join(parts, " ")
}
