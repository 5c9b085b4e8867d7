package lb

import "time"

var clockBase = time.Now()

// Nanotime returns monotonic nanoseconds since an arbitrary point in this
// process (its start). It reads only the monotonic clock.
func Nanotime() int64 { return int64(time.Since(clockBase)) }
