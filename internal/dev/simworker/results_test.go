package simworker

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// TestResultsVocabulary holds the worker's answers to vLLM's result
// vocabulary, pushed and in-band: a fetch is applied, a retain or evict
// deferred to request completion, an unknown type unsupported, a message
// seen before duplicate, a malformed one rejected; and the counts of each.
func TestResultsVocabulary(t *testing.T) {
	s, err := Start(New(Options{ID: "w0"}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	three := msg(action(1, "kv.fetch", `{"block_hashes":[1],"source_control_endpoint":"tcp://a:1"}`),
		action(2, "kv.retain", `{"block_hashes":[]}`), action(3, "x.unknown", `{}`))
	pushResults := func(body string) (int, Results) {
		t.Helper()
		resp, err := http.Post(s.HintEndpoint(), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r Results
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("answer is not Results: %v", err)
		}
		return resp.StatusCode, r
	}
	st, got := pushResults(three)
	want := Results{MessageID: "r1", Results: []ActionResult{{"a1", ResultApplied}, {"a2", ResultDeferred}, {"a3", ResultUnsupported}}}
	if st != http.StatusOK || !cmp.Equal(want, got) {
		t.Errorf("first push: %d %s", st, cmp.Diff(want, got))
	}
	st, got = pushResults(three)
	want = Results{MessageID: "r1", Results: []ActionResult{{"a1", ResultDuplicate}, {"a2", ResultDuplicate}, {"a3", ResultDuplicate}}}
	if st != http.StatusOK || !cmp.Equal(want, got) {
		t.Errorf("second push: %d %s", st, cmp.Diff(want, got))
	}
	st, got = pushResults(`{"protocol_version":"0.2","message_id":"r2","actions":[]}`)
	if st != http.StatusBadRequest || !strings.Contains(got.Error, "protocol_version") {
		t.Errorf("malformed push: %d %+v, want 400 with the reason", st, got)
	}

	// In-band: the completion answer carries the results.
	evict := strings.Replace(msg(action(1, "kv.evict", `{"block_hashes":[]}`)), `"r1"`, `"r3"`, 1)
	_, _, ans := post(t, s.URL+CompletionsPath, carry(t, `{"prompt":"p"}`, evict, dispatch.InBandKVHints))
	wantAns := map[string]any{"message_id": "r3", "results": []any{map[string]any{"action_id": "a1", "result": ResultDeferred}}}
	if d := cmp.Diff(wantAns, ans["kv_hint_results"]); d != "" {
		t.Errorf("kv_hint_results (-want +got):\n%s", d)
	}

	resp, err := http.Get(s.URL + "/hints")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var status Status
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		t.Fatal(err)
	}
	wantPushed := map[string]int64{ResultApplied: 1, ResultDeferred: 1, ResultUnsupported: 1, ResultDuplicate: 3, ResultRejected: 1}
	if d := cmp.Diff(wantPushed, status.Results); d != "" {
		t.Errorf("pushed results (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]int64{ResultDeferred: 1}, status.InBand.Results); d != "" {
		t.Errorf("in-band results (-want +got):\n%s", d)
	}
}
