package console_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestConsoleNewRejectsInvalidOptions(t *testing.T) {
	store := etcdStore(t, etcdtest.Start(t).Client(t))
	for name, opt := range map[string]console.Option{
		"empty prefix":    console.WithPrefix(""),
		"root prefix":     console.WithPrefix("/"),
		"short token":     console.WithAdminToken("short"),
		"nil logger":      console.WithLogger(nil),
		"zero timeout":    console.WithRequestTimeout(0),
		"negative relist": console.WithRelistInterval(-time.Second),
	} {
		if s, err := console.New(store, opt); err == nil {
			_ = s.Close()
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
	if _, err := console.New(nil); err == nil {
		t.Error("New(nil) succeeded, want an error")
	}
	s, err := console.New(store)
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
