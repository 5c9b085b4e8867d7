package xds_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/xds"
)

// noLister is a Discovery that cannot list services; New is never let to
// watch through it.
type noLister struct{}

func (noLister) Watch(context.Context, string) (registry.Watcher, error) {
	return nil, errors.New("not used")
}
func (noLister) Close() error { return nil }

func TestNewRejects(t *testing.T) {
	if _, err := xds.New(noLister{}); !errors.Is(err, xds.ErrNoServices) {
		t.Errorf("New without services or lister: %v, want ErrNoServices", err)
	}
	for _, tc := range []struct {
		opt  xds.Option
		want string
	}{
		{xds.WithServices("Bad_Name"), "WithServices"},
		{xds.WithLBPolicy("Not A Policy"), "WithLBPolicy"},
		{xds.WithProtection(1.5, time.Second), "WithProtection"},
		{xds.WithProtection(0.5, 0), "WithProtection"},
		{xds.WithListInterval(0), "WithListInterval"},
		{xds.WithMaxZones(0), "WithMaxZones"},
		{xds.WithMaxConnections(0), "WithMaxConnections"},
		{xds.WithMaxStreams(-1), "WithMaxStreams"},
		{xds.WithClientShare(0, 1), "WithClientShare"},
		{xds.WithClientShare(1, 0), "WithClientShare"},
		{xds.WithForgetAfter(0), "WithForgetAfter"},
		{xds.WithForgetAfter(-time.Second), "WithForgetAfter"},
		{xds.WithTLSFiles("", "", ""), "WithTLSFiles"},
		{xds.WithLogger(nil), "WithLogger"},
	} {
		_, err := xds.New(noLister{}, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "xds: ") {
			t.Errorf("New with an invalid %s: %v, want an error naming it", tc.want, err)
		}
	}
}
