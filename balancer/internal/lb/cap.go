package lb

import (
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// capPicker admits at most max calls in flight (counted in inFlight,
// which outlives pickers: calls picked by one picker end under the next)
// and fails a pick over it at once with codes.Unavailable, naming the
// limit. A call counts from its pick to its Done; a pick that fails counts
// nothing. An admitted pick allocates its Done callback.
type capPicker struct {
	p        balancer.Picker
	max      int64
	inFlight *atomic.Int64
	err      error
}

func newCapPicker(p balancer.Picker, max int64, inFlight *atomic.Int64, name string) *capPicker {
	return &capPicker{p: p, max: max, inFlight: inFlight,
		err: status.Error(codes.Unavailable, fmt.Sprintf("%s: %d calls in flight, the service's call policy allows at most %d (maxConcurrent)", name, max, max))}
}

// Pick implements balancer.Picker.
func (c *capPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if c.inFlight.Add(1) > c.max {
		c.inFlight.Add(-1)
		return balancer.PickResult{}, c.err
	}
	res, err := c.p.Pick(info)
	if err != nil {
		c.inFlight.Add(-1)
		return res, err
	}
	done := res.Done
	res.Done = func(di balancer.DoneInfo) {
		c.inFlight.Add(-1)
		if done != nil {
			done(di)
		}
	}
	return res, nil
}
