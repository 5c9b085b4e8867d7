// Package health serves the liveness and readiness of the command's
// long-running processes (muster serve, xds, console, register) on their
// HTTP listener: GET /livez and GET /readyz.
//
// /livez answers 200 while the process's own loops run, whatever etcd
// does; 503 means a restart may help.
//
// /readyz answers 200 once the process has loaded what it serves (a
// Discovery's services read once, an instance registered once), and from
// then on for as long as the process lives: an etcd outage afterwards
// keeps it ready, serving the last known list, marked stale in the body
// with since when and why. Every replica of a process reads the same etcd,
// so a readiness that followed etcd would take every replica out of its
// load balancer at once, and with them the last known lists, the only
// thing left to serve during the outage. Before the first load it answers
// 503 and says what it waits for. The body is JSON (Report) in both
// cases.
//
// A Checker is safe for concurrent use; its handlers never wait on etcd.
package health

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"
)

// Service is one service a process serves, as /readyz reports it.
type Service struct {
	// Name is the service's name.
	Name string `json:"name"`
	// Instances is the number of instances served.
	Instances int `json:"instances"`
	// Loaded is true once the service was read (for muster register:
	// registered) at least once.
	Loaded bool `json:"loaded"`
	// StaleSince is when what is served stopped following etcd; zero
	// (left out) while fresh.
	StaleSince time.Time `json:"stale_since,omitzero"`
	// Error is why it is stale, and Cause that reason's class (Cause).
	Error string `json:"error,omitempty"`
	Cause string `json:"cause,omitempty"`
}

// State is what a process says of itself for /readyz: what it still
// waits for, what is stale in the process as a whole, and its services.
type State struct {
	// Waiting says what the process waits for before it has loaded what
	// it serves; empty once it has.
	Waiting string
	// StaleSince and Err say since when, and why, the process as a whole
	// does not follow etcd (a listing of services that fails, an alarm of
	// the embedded etcd); zero and nil when it does.
	StaleSince time.Time
	Err        error
	// Services are the services it serves, sorted by name.
	Services []Service
}

// Report is the body of /readyz.
type Report struct {
	// Ready is true once the process has loaded what it serves; it stays
	// true for the life of the process.
	Ready bool `json:"ready"`
	// Waiting says what a process not yet ready waits for.
	Waiting string `json:"waiting,omitempty"`
	// StaleSince, Error and Cause are State's StaleSince and Err.
	StaleSince time.Time `json:"stale_since,omitzero"`
	Error      string    `json:"error,omitempty"`
	Cause      string    `json:"cause,omitempty"`
	// Services are State's services; an empty list is [].
	Services []Service `json:"services"`
}

// Checker answers /livez and /readyz from a process's state.
type Checker struct {
	live  func() error
	state func() State
	ready atomic.Bool // latched by the first State with nothing to wait for
}

// New returns the Checker of a process: live returns nil while the
// process's loops run (nil live: always live), state what it serves. Both
// are called on every request, from the HTTP server's goroutines, and must
// not block.
func New(live func() error, state func() State) *Checker {
	if live == nil {
		live = func() error { return nil }
	}
	return &Checker{live: live, state: state}
}

// Report returns what /readyz answers now.
func (c *Checker) Report() Report {
	st := c.state()
	if st.Waiting == "" {
		c.ready.Store(true)
	}
	r := Report{Ready: c.ready.Load(), StaleSince: st.StaleSince, Services: st.Services}
	if !r.Ready {
		r.Waiting = st.Waiting
	}
	if st.Err != nil {
		r.Error, r.Cause = st.Err.Error(), Cause(st.Err)
	}
	if r.Services == nil {
		r.Services = []Service{}
	}
	return r
}

// Register adds GET /livez and GET /readyz to mux.
func (c *Checker) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		if err := c.live(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"live": false, "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"live": true})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := c.Report()
		code := http.StatusOK
		if !r.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
