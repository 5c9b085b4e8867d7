package resolver

import (
	"errors"
	"net/url"
	"reflect"
	"testing"

	"github.com/musterhq/muster/internal/served"
)

func TestParseTargetFields(t *testing.T) {
	for target, want := range map[string]query{
		"muster:///user": {Target: served.Target{Service: "user"}},
		"muster:user":    {Target: served.Target{Service: "user"}},
		"muster:///user?version=v1&zone=eu-1a&meta.color=blue&meta.tier=gold": {Target: served.Target{
			Service: "user", Version: "v1", Zone: "eu-1a", Metadata: map[string]string{"color": "blue", "tier": "gold"},
		}},
		"muster:///user?region=eu-1&zone=eu-1a": {Target: served.Target{Service: "user", Region: "eu-1", Zone: "eu-1a"}},
	} {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseTarget(*u)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseTarget(%s) = %+v, %v; want %+v", target, got, err, want)
		}
	}
}

func TestParseTargetErrors(t *testing.T) {
	for _, target := range []string{
		"muster://user",                // authority instead of path
		"muster:///",                   // no service
		"muster:///User",               // invalid name
		"muster:///user?version=%zz",   // bad query escape
		"muster:///user?zone=",         // empty value
		"muster:///user?zone=a&zone=b", // two values
		"muster:///user?region=",       // empty value
		"muster:///user?meta.=x",       // metadata key without a name
		"muster:///user?color=blue",    // unknown key
	} {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		if q, err := parseTarget(*u); !errors.Is(err, ErrBadTarget) {
			t.Errorf("parseTarget(%s) = %+v, %v; want ErrBadTarget", target, q, err)
		}
	}
}
