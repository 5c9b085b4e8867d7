package etcd

import "time"

// outage measures one stretch of failures, from the first failure to the
// success that ends it, so that the way back is logged once, with the
// outage's length. The zero value is "no outage". It is owned by one
// goroutine.
type outage struct {
	since    time.Time // the first failure; zero while none
	failures int       // failed attempts since then
	told     bool      // longer has reported this outage
}

// longer reports, once per outage, that the outage has lasted more than d
// at now.
func (o *outage) longer(now time.Time, d time.Duration) bool {
	if o.since.IsZero() || o.told || now.Sub(o.since) <= d {
		return false
	}
	o.told = true
	return true
}

// fail records a failure at t; an outage starts at its first failure.
func (o *outage) fail(t time.Time) {
	if o.since.IsZero() {
		o.since = t
	}
	o.failures++
}

// length is how long the current outage has lasted at now, 0 if none.
func (o *outage) length(now time.Time) time.Duration {
	if o.since.IsZero() {
		return 0
	}
	return now.Sub(o.since)
}

// end ends the outage at now and returns its length and the number of
// failed attempts; ok is false if there was none, so a caller logs the
// recovery once per outage.
func (o *outage) end(now time.Time) (d time.Duration, failures int, ok bool) {
	if o.since.IsZero() {
		return 0, 0, false
	}
	d, failures = now.Sub(o.since), o.failures
	*o = outage{}
	return d, failures, true
}

// seconds rounds d for a log line: to 100ms, so "21.3s" reads at a glance.
func seconds(d time.Duration) time.Duration {
	return d.Round(100 * time.Millisecond)
}
