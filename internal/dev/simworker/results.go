package simworker

import (
	"encoding/json"
	"net/http"
)

// Action results, in vLLM's kv_hints vocabulary: what became of each action
// of a hint the worker took.
const (
	// ResultApplied: the action was carried out on arrival (kv.fetch).
	ResultApplied = "applied"
	// ResultDeferred: the action waits for the point it names
	// (kv.retain and kv.evict act at request completion).
	ResultDeferred = "deferred"
	// ResultDuplicate: the worker had taken a hint of this message_id
	// already, and does nothing again.
	ResultDuplicate = "duplicate"
	// ResultRejected: the hint breaks the wire format; no action ran.
	ResultRejected = "rejected"
	// ResultUnsupported: the worker knows no action of this type.
	ResultUnsupported = "unsupported"
)

// Results are the results of a hint's actions, as the worker answers a
// pushed hint and adds them to a completion answer (under
// "kv_hint_results") that carried one.
type Results struct {
	MessageID string         `json:"message_id,omitempty"`
	Results   []ActionResult `json:"results"`
	// Error says why a hint was rejected.
	Error string `json:"error,omitempty"`
}

// ActionResult is the result of one action.
type ActionResult struct {
	ActionID string `json:"action_id"`
	Result   string `json:"result"`
}

// resultsOf is what the worker makes of an accepted message: duplicate
// for every action of a message_id it has seen, else by action type.
func resultsOf(m *Message, duplicate bool) Results {
	r := Results{MessageID: m.MessageID, Results: make([]ActionResult, len(m.Actions))}
	for i, a := range m.Actions {
		res := ResultUnsupported
		switch {
		case duplicate:
			res = ResultDuplicate
		case a.ActionType == "kv.fetch":
			res = ResultApplied
		case a.ActionType == "kv.retain" || a.ActionType == "kv.evict":
			res = ResultDeferred
		}
		r.Results[i] = ActionResult{ActionID: a.ActionID, Result: res}
	}
	return r
}

// rejected is the answer to a hint that breaks the wire format.
func rejected(err error) Results {
	return Results{Results: []ActionResult{}, Error: err.Error()}
}

// count adds the results to counts.
func (r Results) count(counts map[string]int64) {
	for _, a := range r.Results {
		counts[a.Result]++
	}
}

// writeResults answers with the results as JSON and status.
func writeResults(rw http.ResponseWriter, status int, r Results) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	json.NewEncoder(rw).Encode(r)
}
