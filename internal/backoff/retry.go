package backoff

import (
	"context"
	"time"
)

// Retry runs attempt again and again until ctx ends: the shape of the
// loops that follow etcd (read, watch, and once the watch ends read
// again). After an attempt that ends while ctx lives, failed (if
// not nil) is told the attempt's error and the wait before the next one;
// the wait is b's next delay counted from the attempt's start, since an
// attempt that waited for an answer has waited already. attempt resets b
// itself once it has made progress worth starting the delays over for.
func Retry(ctx context.Context, b *Backoff, attempt func(ctx context.Context) error, failed func(err error, wait time.Duration)) {
	for ctx.Err() == nil {
		start := time.Now()
		err := attempt(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := max(b.Next()-time.Since(start), 0)
		if failed != nil {
			failed(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
