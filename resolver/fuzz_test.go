package resolver

import (
	"errors"
	"net/url"
	"testing"
)

// FuzzParseTarget feeds arbitrary targets to the target parser and the
// direct-target parser: they must never panic, and every rejection must
// match ErrBadTarget.
func FuzzParseTarget(f *testing.F) {
	for _, seed := range []string{
		"muster:///user", "muster:///user?version=v1&zone=eu-1a&meta.color=blue",
		"muster://user", "muster:///", "muster:///user?zone=", "muster:///user?x=1",
		"direct:///127.0.0.1:80,[::1]:81", "direct:///", "direct:///a:0",
		"muster:///%zz", "muster:///user?meta.=x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.Parse(target)
		if err != nil {
			return // gRPC rejects it before any resolver sees it
		}
		if _, err := parseTarget(*u); err != nil && !errors.Is(err, ErrBadTarget) {
			t.Fatalf("parseTarget(%q) = %v, does not match ErrBadTarget", target, err)
		}
		if _, err := parseDirect(u.Host, u.Path); err != nil && !errors.Is(err, ErrBadTarget) {
			t.Fatalf("parseDirect(%q) = %v, does not match ErrBadTarget", target, err)
		}
	})
}
