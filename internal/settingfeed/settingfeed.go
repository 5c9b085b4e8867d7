// Package settingfeed hands a service setting's stored value (a canary, a
// call policy) to the channel its follower reads, for every backend.
package settingfeed

// Send decodes val (nil: no setting, the zero T) and sends it on ch,
// replacing the value ch holds: ch has a buffer of one and Send is its
// only sender, so a slow reader gets the latest. A value that does not
// decode is reported to bad and sent as the zero T.
func Send[T any](ch chan T, val []byte, decode func([]byte) (T, error), bad func(error)) {
	var v T
	if val != nil {
		var err error
		if v, err = decode(val); err != nil {
			var zero T
			v = zero
			bad(err)
		}
	}
	select {
	case <-ch:
	default:
	}
	ch <- v
}
