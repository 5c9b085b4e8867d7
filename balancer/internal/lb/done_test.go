package lb

import (
	"testing"

	"google.golang.org/grpc/balancer"
)

// ChainDone sets the callback of a result without one, and calls ours
// before the child's when the result has one.
func TestChainDone(t *testing.T) {
	var calls []string
	ours := func(balancer.DoneInfo) { calls = append(calls, "ours") }
	var res balancer.PickResult
	ChainDone(&res, ours)
	res.Done(balancer.DoneInfo{})
	res = balancer.PickResult{Done: func(balancer.DoneInfo) { calls = append(calls, "child's") }}
	ChainDone(&res, ours)
	res.Done(balancer.DoneInfo{})
	if len(calls) != 3 || calls[0] != "ours" || calls[1] != "ours" || calls[2] != "child's" {
		t.Fatalf("callbacks called %v, want ours, then ours and the child's", calls)
	}
}
