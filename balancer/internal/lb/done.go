package lb

import "google.golang.org/grpc/balancer"

// ChainDone makes done res's Done callback, called before the one res
// already has, if any. pick_first children set none, so a pick allocates
// nothing; a child that did is kept correct anyway.
func ChainDone(res *balancer.PickResult, done func(balancer.DoneInfo)) {
	if res.Done == nil {
		res.Done = done
		return
	}
	theirs := res.Done
	res.Done = func(di balancer.DoneInfo) { done(di); theirs(di) }
}
