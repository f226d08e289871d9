package simworker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// post sends a completion request and returns the status, the hint path
// header and the decoded answer (nil unless 200).
func post(t *testing.T, url, body string) (int, string, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, resp.Header.Get(HeaderHintPath), nil
	}
	var ans map[string]any
	if err := json.Unmarshal(raw, &ans); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, raw)
	}
	return resp.StatusCode, resp.Header.Get(HeaderHintPath), ans
}

func carry(t *testing.T, body, hint string, p dispatch.InBandPath) string {
	t.Helper()
	out, err := dispatch.CarryHint([]byte(body), []byte(hint), p)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestInBand: completion requests over HTTP carry hints at each of the
// three paths; the worker checks, records and counts them apart from
// pushed hints, and refuses a malformed or ambiguous one.
func TestInBand(t *testing.T) {
	good := msg(action(1, "kv.fetch", `{"block_hashes":[1],"source_control_endpoint":"tcp://a:1"}`))
	bad := msg(action(1, "kv.fetch", `{"block_hashes":[]}`))
	const plain = `{"model":"m","prompt":"hello","kv_transfer_params":{"do_remote_prefill":true}}`
	const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	type want struct {
		status   int
		path     string // the answer's HeaderHintPath
		object   string // the answer's "object"
		accepted int64
		rejected int
	}
	for _, tc := range []struct {
		name  string
		route string
		body  string
		want  want
	}{
		{"kv_hint", CompletionsPath, carry(t, plain, good, dispatch.InBandKVHint),
			want{200, "kv_transfer_params.kv_hint", "text_completion", 1, 0}},
		{"kv_hints", ChatCompletionsPath, carry(t, chat, good, dispatch.InBandKVHints),
			want{200, "kv_hints", "chat.completion", 1, 0}},
		{"router_hint", CompletionsPath, carry(t, plain, good, dispatch.InBandRouterHint),
			want{200, "kv_transfer_params.router_hint", "text_completion", 1, 0}},
		{"no hint", ChatCompletionsPath, chat, want{200, "", "chat.completion", 0, 0}},
		{"null hint", CompletionsPath, `{"kv_hints":null,"kv_transfer_params":{"kv_hint":null}}`, want{200, "", "text_completion", 0, 0}},
		{"malformed hint", CompletionsPath, carry(t, plain, bad, dispatch.InBandKVHint), want{status: 400, rejected: 1}},
		{"hints at two paths", CompletionsPath, carry(t, carry(t, plain, good, dispatch.InBandKVHint), good, dispatch.InBandKVHints), want{status: 400}},
		{"kv_transfer_params not an object", CompletionsPath, `{"kv_transfer_params":[1]}`, want{status: 400}},
		{"body not an object", CompletionsPath, `[1]`, want{status: 400}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(New(Options{ID: "w"}), "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			status, path, ans := post(t, s.URL+tc.route, tc.body)
			got := want{status: status, path: path, accepted: s.InBandAccepted(), rejected: s.InBandRejected()}
			if ans != nil {
				got.object, _ = ans["object"].(string)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if s.Accepted() != 0 || len(s.Hints()) != 0 {
				t.Errorf("in-band hints counted as pushed: %d", s.Accepted())
			}
			wantRequests := int64(0)
			if tc.want.status == 200 {
				wantRequests = 1
			}
			if s.Requests() != wantRequests {
				t.Errorf("requests %d, want %d", s.Requests(), wantRequests)
			}
			if tc.want.accepted == 1 {
				hs := s.InBandHints()
				if len(hs) != 1 || hs[0].Path != tc.want.path || hs[0].MessageID != "r1" || string(hs[0].Body) != good {
					t.Errorf("recorded %+v, want the hint as carried at %s", hs, tc.want.path)
				}
			}
		})
	}
}

// TestInBandStatus: GET /hints reports the in-band hints and the requests
// beside the pushed ones, WaitForInBandHints sees them, DELETE /hints
// resets them, and a prefill request asking for a remote decode gets the
// transfer parameters for it.
func TestInBandStatus(t *testing.T) {
	s, err := Start(New(Options{ID: "p0"}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	good := msg(action(1, "kv.evict", `{"block_hashes":[]}`))
	_, _, ans := post(t, s.URL+CompletionsPath, carry(t, `{"prompt":"p","kv_transfer_params":{"do_remote_decode":true}}`, good, dispatch.InBandKVHint))
	if diff := cmp.Diff(map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "p0", "remote_request_id": "p0-1"},
		ans["kv_transfer_params"]); diff != "" {
		t.Errorf("kv_transfer_params of the answer (-want +got):\n%s", diff)
	}
	post(t, s.URL+CompletionsPath, `{"prompt":"p"}`)
	if st := postHint(t, s.HintEndpoint(), good); st != http.StatusOK {
		t.Fatalf("push: %d", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if hs, err := s.WaitForInBandHints(ctx, 1); err != nil || len(hs) != 1 {
		t.Fatalf("WaitForInBandHints: %d, %v", len(hs), err)
	}

	read := func() Status {
		t.Helper()
		resp, err := http.Get(s.URL + "/hints")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// The same message, pushed after it came in-band, is a duplicate.
	// Two requests with no prompt text: a token each.
	want := Status{Worker: "p0", Accepted: 1, Requests: 2, PromptTokens: 2, Results: map[string]int64{ResultDuplicate: 1},
		Hints: []Received{{MessageID: "r1", Body: json.RawMessage(good)}},
		InBand: HintCounts{Accepted: 1, Results: map[string]int64{ResultDeferred: 1},
			Hints: []Received{{MessageID: "r1", Body: json.RawMessage(good), Path: "kv_transfer_params.kv_hint"}}}}
	ignoreAt := cmpopts.IgnoreFields(Received{}, "At")
	if diff := cmp.Diff(want, read(), ignoreAt); diff != "" {
		t.Errorf("GET /hints (-want +got):\n%s", diff)
	}
	req, _ := http.NewRequest(http.MethodDelete, s.URL+"/hints", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if diff := cmp.Diff(Status{Worker: "p0", Hints: []Received{}, InBand: HintCounts{Hints: []Received{}}}, read(), ignoreAt); diff != "" {
		t.Errorf("after DELETE /hints (-want +got):\n%s", diff)
	}
}

// TestSinkInBand: a sink, served by fasthttp, answers completion requests
// too and counts their hints unchecked.
func TestSinkInBand(t *testing.T) {
	s, err := Start(New(Options{ID: "w", Sink: true}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := carry(t, `{"prompt":"`+strings.Repeat("x", 64<<10)+`"}`, msg(action(1, "kv.fetch", `{"block_hashes":[]}`)), dispatch.InBandKVHints)
	if st, path, _ := post(t, s.URL+CompletionsPath, body); st != 200 || path != "kv_hints" {
		t.Fatalf("status %d path %q", st, path)
	}
	if s.InBandAccepted() != 1 || len(s.InBandHints()) != 0 || s.Requests() != 1 {
		t.Errorf("accepted %d recorded %d requests %d; want 1, 0, 1", s.InBandAccepted(), len(s.InBandHints()), s.Requests())
	}
}
