package console

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/musterhq/muster/registry"
)

// maxActionInstances bounds the instances one action names.
const maxActionInstances = 10000

// Actions, named as the muster commands that do the same.
const (
	actionDrain   = "drain"
	actionUndrain = "undrain"
	actionWeight  = "weight"
)

// actionRequest is the body of POST /ui/api/action.
type actionRequest struct {
	Action  string   `json:"action"`
	Service string   `json:"service"`
	IDs     []string `json:"ids"`
	// Weight is the weight of a weight action, 0..registry.MaxWeight.
	Weight int `json:"weight"`
	// Cluster names the cluster of the instances, required when the
	// console reads several (NewClusters), empty otherwise.
	Cluster string `json:"cluster,omitempty"`
}

// actionResult answers an action.
type actionResult struct {
	Done   int            `json:"done"`
	Failed []failedAction `json:"failed,omitempty"`
}

type failedAction struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

func (a actionRequest) validate() error {
	switch a.Action {
	case actionDrain, actionUndrain:
	case actionWeight:
		if a.Weight < 0 || a.Weight > registry.MaxWeight {
			return fmt.Errorf("weight %d is not in 0..%d", a.Weight, registry.MaxWeight)
		}
	default:
		return fmt.Errorf("unknown action %q", a.Action)
	}
	if err := registry.ValidateName(a.Service); err != nil {
		return err
	}
	if len(a.IDs) == 0 || len(a.IDs) > maxActionInstances {
		return fmt.Errorf("want 1..%d instance IDs, got %d", maxActionInstances, len(a.IDs))
	}
	for _, id := range a.IDs {
		if err := registry.ValidateID(id); err != nil {
			return err
		}
	}
	return nil
}

// authorizeAction checks that r comes from a logged-in admin with the
// session's CSRF token (auth.authorize) and returns who it is, for the log,
// and the session; otherwise it answers 403, logs the refusal of what and
// returns false.
func (s *Server) authorizeAction(w http.ResponseWriter, r *http.Request, what string) (string, adminSession, bool) {
	who, sess, ok := s.auth.authorize(r, time.Now())
	if !ok {
		s.opts.log.Warn("console: "+what+" refused", "from", r.RemoteAddr, "admin_enabled", s.auth.enabled())
		http.Error(w, "console: actions need an admin session and its CSRF token", http.StatusForbidden)
	}
	return who, sess, ok
}

// writer is the Admin of p's store whose writes are recorded as made by
// the user of session sess from the console: in the journal as
// sess.who() from registry.SourceConsole, a policy as set by
// "alice (console)" where the backend records who set it.
func (p *part) writer(sess adminSession) registry.Admin {
	return p.store.Admin(registry.Actor{Who: sess.who(), Source: registry.SourceConsole})
}

// request is ctx bounded by the console's request timeout
// (WithRequestTimeout), for one request to a registry.
func (s *Server) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.requestTimeout)
}

// handleAction drains, undrains or weighs instances, for a logged-in admin
// whose request carries the session's CSRF token.
func (s *Server) handleAction(w http.ResponseWriter, r *http.Request) {
	who, sess, ok := s.authorizeAction(w, r, "action")
	if !ok {
		return
	}
	var req actionRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := req.validate(); err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusBadRequest)
		return
	}
	p, err := s.partNamed(req.Cluster)
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusBadRequest)
		return
	}
	admin := p.writer(sess)
	var o registry.Override
	switch req.Action {
	case actionDrain:
		zero := 0
		o.Weight = &zero
	case actionWeight:
		o.Weight = &req.Weight
	}
	var res actionResult
	for _, id := range req.IDs {
		ctx, cancel := s.request(r.Context())
		var err error
		if req.Action == actionUndrain {
			err = admin.ClearOverride(ctx, req.Service, id)
		} else {
			err = admin.SetOverride(ctx, req.Service, id, o)
		}
		cancel()
		if err != nil {
			res.Failed = append(res.Failed, failedAction{ID: id, Error: err.Error()})
			continue
		}
		res.Done++
	}
	attrs := []any{"who", who, "action", req.Action, "service", req.Service,
		"instances", len(req.IDs), "done", res.Done, "failed", len(res.Failed)}
	if req.Action == actionWeight {
		attrs = append(attrs, "weight", req.Weight)
	}
	if p.name != "" {
		attrs = append(attrs, "cluster", p.name)
	}
	if len(req.IDs) <= 20 {
		attrs = append(attrs, "ids", req.IDs)
	}
	s.opts.log.Info("console: action", attrs...)
	writeJSON(w, http.StatusOK, res)
}
