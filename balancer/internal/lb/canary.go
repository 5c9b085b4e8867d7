package lb

import (
	"context"
	rand "math/rand/v2"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/internal/hash"
	"github.com/musterhq/muster/registry"
)

// canaryShare decides which uncolored calls a canary (registry.Canary)
// sends to its color: those whose draw is below threshold, out of 2⁶⁴.
// The draw is a hash of the call's canary key (color.WithKey) when it has
// one, so a key always gets the same answer for the same share, at every
// client and every hop; a random number otherwise.
type canaryShare struct {
	threshold uint64
	all       bool   // 100 %: every call
	header    string // the key's header when not color.KeyHeader (a call policy's affinityHeader); "" for it
}

// newCanaryShare returns the share of c.Percent (0..100).
func newCanaryShare(c registry.Canary) canaryShare {
	if c.Percent >= 100 {
		return canaryShare{all: true}
	}
	return canaryShare{threshold: uint64(c.Percent / 100 * (1 << 64))}
}

// takes reports whether the call of ctx goes to the canary. It does not
// allocate when the key, if any, was set by color.WithKey.
func (s canaryShare) takes(ctx context.Context) bool {
	if s.all {
		return true
	}
	var draw uint64
	k := ""
	if s.header == "" {
		k = color.KeyFromContext(ctx)
	} else {
		k = color.KeyFromContextHeader(ctx, s.header)
	}
	if k != "" {
		draw = hash.String(k)
	} else {
		draw = rand.Uint64()
	}
	return draw < s.threshold
}
