package lb

import (
	"math"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/internal/hash"
)

// affinityPicker keeps the calls that carry a key on one endpoint: a call
// whose key (color.WithKey's, else the call policy's affinityHeader) is
// set goes to the endpoint that weighted rendezvous hashing chooses for the
// key among the group's READY endpoints that are not ejected; a call
// without a key goes to the policy's picker, as without affinity. The
// choice depends only on the key, the endpoints' addresses and their
// weights, so every client sends a key to the same endpoint, and an
// endpoint leaving moves only the keys it had.
//
// A keyed pick costs a logarithm per endpoint (O(n)); it allocates only
// what reading the key from the outgoing metadata does (nothing for a key
// set with color.WithKey); a call without a key costs one metadata lookup
// more than the policy's pick. Keyed calls feed the endpoint's ejection state (their failures
// count as any call's) but not the policy's own statistics (muster_p2c's
// latency and load): they never go elsewhere for them.
type affinityPicker struct {
	inner  balancer.Picker // the policy's picker over the same endpoints
	header string
	eps    []affinityEndpoint
}

// affinityEndpoint is one endpoint of an affinityPicker.
type affinityEndpoint struct {
	picker  balancer.Picker // the endpoint's pick_first picker
	outlier *OutlierState
	seed    uint64  // the endpoint's address, hashed
	weight  float64 // > 0
	done    func(balancer.DoneInfo)
}

// newAffinityPicker returns the affinityPicker over ready (non-empty)
// around inner, the policy's picker over them, for keys in header. det
// records the keyed calls' outcomes; count says whether to count them on
// the endpoints' OutlierState (for a policy without its own call count).
func newAffinityPicker[T any](inner balancer.Picker, header string, ready []Ready[T], det *Detector, count bool) *affinityPicker {
	p := &affinityPicker{inner: inner, header: header, eps: make([]affinityEndpoint, len(ready))}
	for i, r := range ready {
		s := &r.Endpoint.Outlier
		p.eps[i] = affinityEndpoint{
			picker:  r.Picker,
			outlier: s,
			seed:    hash.String(r.Endpoint.key),
			weight:  float64(max(r.Weight, 1)),
			done:    r.Endpoint.affinityDone(det, count),
		}
	}
	return p
}

// affinityDone returns e's Done callback for keyed calls, made once per
// endpoint.
func (e *Endpoint[T]) affinityDone(det *Detector, count bool) func(balancer.DoneInfo) {
	if e.keyedDone == nil {
		s := &e.Outlier
		e.keyedDone = func(info balancer.DoneInfo) {
			switch Classify(info) {
			case Success:
				if count {
					s.CountCall()
				}
				det.Succeeded(s)
			case Failure:
				if count {
					s.CountCall()
				}
				det.Record(s, true, false, Nanotime())
			}
		}
	}
	return e.keyedDone
}

// Pick implements balancer.Picker.
func (p *affinityPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	k := color.KeyFromContextHeader(info.Ctx, p.header)
	if k == "" {
		return p.inner.Pick(info)
	}
	e := p.choose(hash.String(k))
	if e == nil {
		return p.inner.Pick(info) // every endpoint ejected
	}
	res, err := e.picker.Pick(info)
	if err == nil {
		res.Done = e.done
	}
	return res, err
}

// choose returns the endpoint of the highest weighted rendezvous score
// for the key's hash, −weight / ln(u) with u uniform in (0, 1) drawn from
// the key and the endpoint; nil when every endpoint is ejected.
func (p *affinityPicker) choose(key uint64) *affinityEndpoint {
	var best *affinityEndpoint
	bestScore := math.Inf(-1)
	for i := range p.eps {
		e := &p.eps[i]
		if e.outlier.Ejected() {
			continue
		}
		if s := RendezvousScore(key, e.seed, e.weight); s > bestScore {
			best, bestScore = e, s
		}
	}
	return best
}

// RendezvousScore is the weighted rendezvous (highest random weight)
// score of an endpoint, hashed to seed, of weight w > 0 for a key hashed
// to key: −w / ln(u), u in (0, 1) from both hashes. The endpoint of the
// highest score wins; each endpoint wins a share of the keys proportional
// to its weight.
func RendezvousScore(key, seed uint64, w float64) float64 {
	u := (float64(hash.Mix64(key^seed)>>11) + 0.5) / (1 << 53)
	return -w / math.Log(u)
}
