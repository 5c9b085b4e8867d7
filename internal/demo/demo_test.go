package demo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/demo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScenarioKeepsEveryPromise(t *testing.T) {
	var out bytes.Buffer
	res, err := demo.Run(context.Background(), demo.Config{Duration: 30 * time.Second, Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Log(out.String()[strings.LastIndex(out.String(), "Summary"):])
	if !res.OK() || len(res.Promises) != 6 {
		t.Fatalf("promises %+v\n%s", res.Promises, out.String())
	}
	if strings.Contains(out.String(), "\033[") {
		t.Fatalf("plain output has terminal escapes")
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := demo.Run(context.Background(), demo.Config{Duration: time.Second}); err == nil {
		t.Fatalf("a 1s demo was accepted")
	}
	if _, err := demo.Run(context.Background(), demo.Config{Backends: 2}); err == nil {
		t.Fatalf("a 2-backend demo was accepted")
	}
}
