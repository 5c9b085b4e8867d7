package etcd

import "time"

// waits holds, by key, the calls the run loop has not answered yet: a
// Register waiting for its entry to be written, a Deregister for its key to
// be gone. The loop answers them where their key changes (settle), all at
// once after an attempt etcd did not answer or at Close (answerAll), so
// that a write wakes only its own callers: with 10,000 calls waiting, each
// transaction answers the callers of its keys and no other. A call whose
// caller stopped listening (its ctx ended, or the request timeout passed)
// is forgotten when another call of its key arrives, so callers that give
// up leave nothing behind. waits does no I/O and takes no lock: the run
// loop owns it.
type waits map[string][]*call

// add keeps c until its key settles it, forgetting the calls of the key
// whose callers gave up by now.
func (w waits) add(c *call, now time.Time) {
	kept := w[c.key][:0]
	for _, o := range w[c.key] {
		if !o.gaveUp(now) {
			kept = append(kept, o)
		}
	}
	w[c.key] = append(kept, c)
}

// settle answers the calls of key for which done reports an outcome.
func (w waits) settle(key string, done func(*call) (bool, error), answer func(*call, error)) {
	cs, ok := w[key]
	if !ok {
		return
	}
	kept := cs[:0]
	for _, c := range cs {
		if ok, err := done(c); ok {
			answer(c, err)
		} else {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		delete(w, key)
		return
	}
	clear(cs[len(kept):])
	w[key] = kept
}

// settleAll settles the calls of every key.
func (w waits) settleAll(done func(*call) (bool, error), answer func(*call, error)) {
	for key := range w {
		w.settle(key, done, answer)
	}
}

// answerAll answers every call with err.
func (w waits) answerAll(err error, answer func(*call, error)) {
	for key, cs := range w {
		for _, c := range cs {
			answer(c, err)
		}
		delete(w, key)
	}
}

// len returns the number of keys with calls waiting, and the calls.
func (w waits) len() (keys, calls int) {
	for _, cs := range w {
		calls += len(cs)
	}
	return len(w), calls
}
