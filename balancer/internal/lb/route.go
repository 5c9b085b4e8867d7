package lb

import (
	"fmt"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
	grpcresolver "google.golang.org/grpc/resolver"
)

// colorOf returns an endpoint's color: its instance's metadata entry key,
// "" (the base) for an endpoint without one or without an instance, and
// for every endpoint when key is "" (routing off).
func colorOf(ep grpcresolver.Endpoint, key string) string {
	if key == "" {
		return ""
	}
	if in, ok := lbattr.InstanceOf(ep); ok {
		return in.Metadata[key]
	}
	return ""
}

// routePicker sends each call to the policy's picker over the endpoints of
// the call's color. The per-color pickers are built with it, so a pick
// costs a context lookup and a map lookup more than the policy's own, and
// allocates nothing.
type routePicker struct {
	base      balancer.Picker            // over the base endpoints; nil when none is READY
	colors    map[string]balancer.Picker // over each color's READY endpoints; read-only
	strict    bool
	canary    balancer.Picker // the canary's color's picker; nil without a canary
	share     canaryShare     // of the uncolored calls canary takes
	errNoBase error           // an uncolored call (or a falling-back one) without a base
	errStrict error           // a strict colored call without its color
}

// Pick implements balancer.Picker: a colored call goes to its color's
// picker, else (unless strict) to the base's, also when its color has no
// admissible endpoint (ErrNoAdmissible); an uncolored call to the
// canary's color's when the canary's share takes it, else to the base's.
// Calls with nowhere to go fail with codes.Unavailable.
func (p *routePicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if c := color.FromContext(info.Ctx); c != "" {
		if cp := p.colors[c]; cp != nil {
			// A color none of whose endpoints is admissible now is as one
			// without a READY endpoint.
			if res, err := cp.Pick(info); err != ErrNoAdmissible {
				return res, err
			}
		}
		if p.strict {
			return balancer.PickResult{}, p.errStrict
		}
	} else if p.canary != nil && p.share.takes(info.Ctx) {
		if res, err := p.canary.Pick(info); err != ErrNoAdmissible {
			return res, err
		}
	}
	if p.base == nil {
		return balancer.PickResult{}, p.errNoBase
	}
	return p.base.Pick(info)
}

// route returns the picker over ready (non-empty, sorted) for the color
// configuration cc and the canary setting cn (zero for none): the policy's own picker when no endpoint has a color
// and cc is not strict (routing costs nothing then), else a routePicker
// over one policy picker per color and one over the base. Called under
// b.mu.
func (b *Base[T]) route(ready []Ready[T], cc ColorConfig, cn registry.Canary) balancer.Picker {
	var base []Ready[T]
	var groups map[string][]Ready[T]
	for _, r := range ready {
		if r.color == "" {
			base = append(base, r)
			continue
		}
		if groups == nil {
			groups = map[string][]Ready[T]{}
		}
		groups[r.color] = append(groups[r.color], r)
	}
	if groups == nil && !cc.Strict {
		return b.newPicker("", ready)
	}
	var basePicker balancer.Picker
	if len(base) > 0 {
		basePicker = b.newPicker("", base)
	}
	colors := make(map[string]balancer.Picker, len(groups))
	for c, g := range groups {
		colors[c] = b.newPicker(c, g)
	}
	rp := NewRoutePicker(b.policy.Name, cc, cn, basePicker, colors).(*routePicker)
	if h := b.affinity; h != "" && h != color.KeyHeader {
		rp.share.header = h
	}
	return rp
}

// NewRoutePicker returns the picker that routes calls by color: to
// colors[c] for a call of color c, else (unless cc.Strict) to base; base
// nil means no base endpoint is READY. An uncolored call goes to
// colors[cn.Color] when the canary cn takes it (cn zero: never). It takes colors, which must not be
// modified afterwards. name prefixes its errors. Base uses it; it is
// exported for the policies' benchmarks and allocation tests.
func NewRoutePicker(name string, cc ColorConfig, cn registry.Canary, base balancer.Picker, colors map[string]balancer.Picker) balancer.Picker {
	var canary balancer.Picker
	if cn.Color != "" && cn.Percent > 0 {
		canary = colors[cn.Color]
	}
	return &routePicker{
		canary:    canary,
		share:     newCanaryShare(cn),
		base:      base,
		colors:    colors,
		strict:    cc.Strict,
		errNoBase: status.Error(codes.Unavailable, fmt.Sprintf("%s: no READY endpoint of the base (without a %q metadata entry) for an uncolored call", name, cc.Key)),
		errStrict: status.Error(codes.Unavailable, fmt.Sprintf("%s: no READY endpoint of the call's color, and the colors config is strict", name)),
	}
}
