package lb

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/serviceconfig"
)

// testConfig is a policy's parsed config, for ConfigOf.
type testConfig struct {
	serviceconfig.LoadBalancingConfig
	n int
}

// A policy's own field and the shared ones decode from one object; errors
// carry the policy's name, own's before the shared fields'; an empty
// config is the default without own being called.
func TestParseConfigSharedAndOwnFields(t *testing.T) {
	var j struct {
		Mine *int `json:"mine"`
		ConfigJSON
	}
	own := func() error {
		if j.Mine != nil && *j.Mine < 0 {
			return errors.New("mine: negative")
		}
		return nil
	}
	c, err := ParseConfig("p", json.RawMessage(`{"mine":1,"colors":{"key":"k"}}`), &j, own)
	if err != nil || c.Colors.Key != "k" || *j.Mine != 1 || c.Outlier != DefaultOutlierConfig() {
		t.Fatalf("ParseConfig = %+v, %v (mine %v)", c, err, j.Mine)
	}
	for js, want := range map[string]string{
		`{"mine":-1,"outlier":{"maxEjectionPercent":150}}`: "p: mine: negative",
		`{"outlier":{"maxEjectionPercent":150}}`:           "p: outlier.maxEjectionPercent: 150 is out of range 0..100",
		`{"other":1}`:                                      `p: invalid config: json: unknown field "other"`,
		`{} {}`:                                            "p: invalid config: unexpected data after the JSON object",
	} {
		j.Mine = nil
		if _, err := ParseConfig("p", json.RawMessage(js), &j, own); err == nil || err.Error() != want {
			t.Errorf("ParseConfig(%s) error = %v, want %q", js, err, want)
		}
	}
	// Each shared field's error stops the parse, whatever follows it.
	for _, field := range []string{"endpointWeights", "colors", "locality", "slowStart"} {
		js := `{"` + field + `":[1],"slowStart":{"window":"1s"}}`
		if field == "slowStart" {
			js = `{"slowStart":[1]}`
		}
		j.Mine, j.ConfigJSON = nil, ConfigJSON{}
		if _, err := ParseConfig("p", json.RawMessage(js), &j, own); err == nil || !strings.HasPrefix(err.Error(), "p: "+field+":") {
			t.Errorf("ParseConfig(%s) error = %v, want one naming p and %s", js, err, field)
		}
	}
	called := false
	c, err = ParseConfig("p", json.RawMessage(" "), &ConfigJSON{}, func() error { called = true; return nil })
	if err != nil || called || c.Outlier != DefaultOutlierConfig() || c.Colors != DefaultColorConfig() || c.Locality != DefaultLocalityConfig() {
		t.Fatalf("empty config = %+v, %v (own called %v)", c, err, called)
	}
}

func TestConfigOf(t *testing.T) {
	def := func() *testConfig { return &testConfig{n: 1} }
	if c, err := ConfigOf("p", balancer.ClientConnState{}, def); err != nil || c.n != 1 {
		t.Fatalf("no config: %+v, %v; want the default", c, err)
	}
	mine := &testConfig{n: 2}
	if c, err := ConfigOf("p", balancer.ClientConnState{BalancerConfig: mine}, def); err != nil || c != mine {
		t.Fatalf("own config: %+v, %v", c, err)
	}
	other := struct {
		serviceconfig.LoadBalancingConfig
	}{}
	_, err := ConfigOf("p", balancer.ClientConnState{BalancerConfig: other}, def)
	if err == nil || !strings.HasPrefix(err.Error(), "p: unexpected balancer config of type ") {
		t.Fatalf("another type: %v, want an error naming the policy", err)
	}
}
