package zookeeper

import "sync"

// maxInFlight bounds the requests a Registrar or a Discovery has in flight
// at once for one pass or read. The client sends requests without waiting
// for the answers before, and ZooKeeper answers those of one connection in
// order, so requests in flight together cost about one round trip instead
// of one each: 1,000 instances are written (or read) in a few round trips,
// not 1,000.
const maxInFlight = 64

// inFlight calls do(i) for every i in [0, n), up to maxInFlight at once,
// and returns when all have returned. With n == 1 (one change, the common
// case) it calls do in the caller's goroutine.
func inFlight(n int, do func(i int)) {
	if n == 1 {
		do(0)
		return
	}
	upTo(n, maxInFlight, do)
}

// upTo calls do(i) for every i in [0, n) from at most concurrent
// goroutines (at least one), and returns when all have returned.
func upTo(n, concurrent int, do func(i int)) {
	concurrent = max(concurrent, 1)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, concurrent) {
		wg.Go(func() {
			for i := range next {
				do(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
