package demo_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/cmd/muster/internal/demo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The whole scenario is run by cmd/muster's TestDemoRunsHeadlessAndKeepsItsPromises.

func TestConfigErrors(t *testing.T) {
	if _, err := demo.Run(context.Background(), demo.Config{Duration: time.Second}); err == nil {
		t.Fatalf("a 1s demo was accepted")
	}
	if _, err := demo.Run(context.Background(), demo.Config{Backends: 2}); err == nil {
		t.Fatalf("a 2-backend demo was accepted")
	}
}
