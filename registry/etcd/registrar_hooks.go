package etcd

// registrarHooks is what tests observe or change in a Registrar, kept out
// of the Registrar itself: nil in every Registrar made without the
// package's test options, and then never consulted.
type registrarHooks struct {
	// woken, if not nil, is told how many times a Register or Deregister
	// woke up to look again before it returned, once per call.
	woken func(n int64)
	// broadcastDeregisters makes Deregisters wake on every change of the
	// registrar's state, as they did before each waited for its own key:
	// the old wait, kept to compare the two.
	broadcastDeregisters bool
}

// wokenUp reports n wake-ups of one waiting call to the hooks, if any.
func (h *registrarHooks) wokenUp(n int64) {
	if h != nil && h.woken != nil {
		h.woken(n)
	}
}

// broadcasts reports whether Deregisters use the old, broadcast wait.
func (h *registrarHooks) broadcasts() bool { return h != nil && h.broadcastDeregisters }
