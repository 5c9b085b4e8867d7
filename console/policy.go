package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/musterhq/muster/registry"
)

// maxPolicyAssignments bounds the assignments of one policy edit: each
// field once.
const maxPolicyAssignments = 32

// policyRequest is the body of POST /ui/api/policy: assignments to merge
// into the service's policy, as "muster policy <service> set" takes them,
// or a clear.
type policyRequest struct {
	Service string   `json:"service"`
	Set     []string `json:"set,omitempty"`
	Clear   bool     `json:"clear,omitempty"`
	// Cluster names the cluster whose policy to edit, required when the
	// console reads several (NewClusters), empty otherwise.
	Cluster string `json:"cluster,omitempty"`
}

// policyResult answers a policy edit: the policy as stored, null for none.
type policyResult struct {
	Policy json.RawMessage `json:"policy"`
}

// policyFieldView is one field of the policy editor.
type policyFieldView struct {
	Name    string `json:"name"`
	Range   string `json:"range"`
	About   string `json:"about"`
	Default string `json:"default"`
}

// handlePolicyFields lists the policy's fields for the page's editor.
func (s *Server) handlePolicyFields(w http.ResponseWriter, _ *http.Request) {
	var out []policyFieldView
	for _, f := range registry.PolicyFields() {
		out = append(out, policyFieldView{Name: f.Name, Range: f.Range, About: f.About, Default: f.Default})
	}
	writeJSON(w, http.StatusOK, out)
}

// validate checks the request's shape and parses its assignments.
func (req policyRequest) validate() (registry.PolicyEdit, error) {
	if err := registry.ValidateName(req.Service); err != nil {
		return registry.PolicyEdit{}, err
	}
	switch {
	case req.Clear && len(req.Set) > 0:
		return registry.PolicyEdit{}, errors.New("set or clear the policy, not both")
	case req.Clear:
		return registry.PolicyEdit{}, nil
	case len(req.Set) > maxPolicyAssignments:
		return registry.PolicyEdit{}, fmt.Errorf("want at most %d FIELD=VALUE assignments, got %d", maxPolicyAssignments, len(req.Set))
	}
	edit, err := registry.ParsePolicyEdit(req.Set)
	var pe *registry.PolicyEditError
	if errors.As(err, &pe) {
		return registry.PolicyEdit{}, errors.New(pe.Reason)
	}
	return edit, err
}

// handlePolicy sets (merging FIELD=VALUE assignments into the stored
// policy, as muster policy set does) or clears a service's call policy,
// for a logged-in admin whose request carries the session's CSRF token. The
// policy is recorded as set by the session's user, "alice (console)",
// where the backend records who set it.
func (s *Server) handlePolicy(w http.ResponseWriter, r *http.Request) {
	who, sess, ok := s.authorizeAction(w, r, "policy")
	if !ok {
		return
	}
	var req policyRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	edit, err := req.validate()
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusBadRequest)
		return
	}
	part, err := s.partNamed(req.Cluster)
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusBadRequest)
		return
	}
	admin := part.writer(sess)
	var p registry.Policy
	if !req.Clear {
		// Read, merge, write, as the command does: the last write wins.
		ctx, cancel := s.request(r.Context())
		old, _, err := admin.Policy(ctx, req.Service)
		cancel()
		if err != nil {
			http.Error(w, "console: read the policy of "+req.Service+": "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if p, err = edit.Apply(old.Policy); err != nil {
			var fe *registry.FieldError
			if errors.As(err, &fe) {
				err = fmt.Errorf("%s: %s", fe.Field, fe.Reason)
			}
			http.Error(w, fmt.Sprintf("console: invalid policy of %s: %v", req.Service, err), http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := s.request(r.Context())
	if p.IsZero() {
		err = admin.ClearPolicy(ctx, req.Service)
	} else {
		err = admin.SetPolicy(ctx, req.Service, p)
	}
	cancel()
	if err != nil {
		http.Error(w, "console: write the policy of "+req.Service+": "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	attrs := []any{"who", who, "service", req.Service}
	if part.name != "" {
		attrs = append(attrs, "cluster", part.name)
	}
	if req.Clear {
		attrs = append(attrs, "clear", true)
	} else {
		attrs = append(attrs, "set", req.Set)
	}
	s.opts.log.Info("console: policy", attrs...)
	res := policyResult{Policy: json.RawMessage("null")}
	ctx, cancel = s.request(r.Context())
	defer cancel()
	if info, ok, err := admin.Policy(ctx, req.Service); err == nil && ok {
		if js, err := registry.MarshalPolicyInfo(info); err == nil {
			res.Policy = js
		}
	}
	writeJSON(w, http.StatusOK, res)
}
