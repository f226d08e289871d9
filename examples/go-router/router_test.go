package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/test/receivers"
)

// engine is a worker on loopback that keeps the request bodies it gets,
// as they arrived.
type engine struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func startEngine(t *testing.T) *engine {
	e := &engine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || !json.Valid(body) {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.bodies = append(e.bodies, body)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *engine) last(t *testing.T) []byte {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.bodies) == 0 {
		t.Fatal("the worker got no request")
	}
	return e.bodies[len(e.bodies)-1]
}

// envelope is the hint message as an engine that takes Dynamo's router
// hints reads it; unknown fields are refused.
type envelope struct {
	ProtocolVersion string `json:"protocol_version"`
	MessageID       string `json:"message_id"`
	Actions         []struct {
		ActionID      string          `json:"action_id"`
		ActionType    string          `json:"action_type"`
		ActionVersion string          `json:"action_version"`
		Payload       json.RawMessage `json:"payload"`
	} `json:"actions"`
}

// action is an envelope action flattened for comparison.
type action struct{ ID, Type, Version, Payload string }

func readEnvelope(t *testing.T, raw json.RawMessage) (version, id string, actions []action) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var env envelope
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("the hint is not an envelope: %v\n%s", err, raw)
	}
	for _, a := range env.Actions {
		actions = append(actions, action{a.ActionID, a.ActionType, a.ActionVersion, string(a.Payload)})
	}
	return env.ProtocolVersion, env.MessageID, actions
}

// fields decodes a JSON object into its members' raw bytes.
func fields(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, raw)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

// TestHintInBand: a request through the router reaches its booked worker
// with the hint at the path the router was given, exactly as the
// dispatcher built it, and every field the caller sent, the caller's own
// transfer parameters included, arrives byte for byte; a worker without
// router_hint gets the caller's body as it was sent.
func TestHintInBand(t *testing.T) {
	doc, err := os.ReadFile("testdata/hints.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The caller's body: spacing and escapes that a re-encoding would
	// change, and a prefill/decode handshake.
	const caller = `{"model":"llama", "prompt":"` + "Tell me about \\\"KV\\\" caches\\n" + `` +
		`xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",` +
		` "max_tokens":8, "temperature":0.50, "stop":["\u00e9"],` +
		` "kv_transfer_params":{"do_remote_prefill":true, "remote_block_ids":[1,2]}}`
	wantActions := []action{
		{"a1", "kv.fetch", "1.0", `{"block_hashes":[11,18446744073709551615],"source_control_endpoint":"tcp://10.0.0.7:23280"}`},
		{"a2", "kv.evict", "1.0", `{"block_hashes":[],"execute_at":"request_completion","include_current_request":true}`},
	}
	paths := []struct {
		path   dispatch.InBandPath
		parent string // "" for the top level
		key    string
	}{
		{dispatch.InBandKVHint, "kv_transfer_params", "kv_hint"},
		{dispatch.InBandKVHints, "", "kv_hints"},
		{dispatch.InBandRouterHint, "kv_transfer_params", "router_hint"},
	}
	for _, tc := range paths {
		t.Run(tc.path.String(), func(t *testing.T) {
			capable, plain := startEngine(t), startEngine(t)
			workers := []Worker{{ID: "decode-0", URL: capable.URL, RouterHint: true}, {ID: "decode-1", URL: plain.URL}}
			d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: Capabilities(workers)})
			if err := d.Load(doc, "testdata/hints.yaml"); err != nil {
				t.Fatal(err)
			}
			rt := NewRouter("decode", workers, d)
			rt.HintPath = tc.path
			rt.next.Store(uint64(len(workers) - 1)) // the first booking goes to decode-0
			front := httptest.NewServer(rt)
			t.Cleanup(front.Close)

			send := func(worker string) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/completions", strings.NewReader(caller))
				req.Header.Set("X-Request-Id", "r-"+worker)
				req.Header.Set("X-Session-Id", "s1")
				req.Header.Set("X-Session-Turn", "3")
				req.Header.Set("X-Session-Final", "true")
				req.Header.Set("X-KV-Copy", `{"source_worker":"decode-9","source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[11,18446744073709551615]}`)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Header.Get("X-Worker") != worker {
					t.Fatalf("status %d from worker %q, want 200 from %s", resp.StatusCode, resp.Header.Get("X-Worker"), worker)
				}
			}

			send("decode-0")
			got := fields(t, capable.last(t))
			sent := fields(t, []byte(caller))
			gotParams := fields(t, []byte(got["kv_transfer_params"]))
			sentParams := fields(t, []byte(sent["kv_transfer_params"]))

			// The hint, where the path says, and nowhere else.
			var hint string
			if tc.parent == "" {
				hint = got[tc.key]
				delete(got, tc.key)
			} else {
				hint = gotParams[tc.key]
				delete(gotParams, tc.key)
				got["kv_transfer_params"] = sent["kv_transfer_params"]
			}
			if hint == "" {
				t.Fatalf("no hint at %s in %s", tc.path, capable.last(t))
			}
			version, id, actions := readEnvelope(t, json.RawMessage(hint))
			if version != "0.1" || id != "r-decode-0" {
				t.Errorf("protocol_version %q, message_id %q; want 0.1 and r-decode-0", version, id)
			}
			if diff := cmp.Diff(wantActions, actions); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			// Every engine that reads hints takes it as carried: KVCR
			// (kv_hint), vLLM, TensorRT-LLM and SGLang (kv_hints).
			verdicts, err := receivers.CheckAll([]byte(hint))
			if err != nil {
				t.Error(err)
			} else if f := verdicts["kvcr"].Fetch; f == nil || len(f.BlockHashes) != 2 {
				t.Errorf("KVCR reads the fetch as %+v, want its two blocks", f)
			}
			for _, other := range paths {
				if other.path == tc.path {
					continue
				}
				if _, ok := got[other.key]; ok && other.parent == "" {
					t.Errorf("a hint also at %s", other.path)
				}
				if _, ok := gotParams[other.key]; ok && other.parent != "" {
					t.Errorf("a hint also at %s", other.path)
				}
			}

			// Everything else, byte for byte.
			if diff := cmp.Diff(sent, got); diff != "" {
				t.Errorf("the caller's fields changed on the way (-sent +arrived):\n%s", diff)
			}
			if diff := cmp.Diff(sentParams, gotParams); diff != "" {
				t.Errorf("the caller's kv_transfer_params changed on the way (-sent +arrived):\n%s", diff)
			}

			// decode-1 does not advertise router_hint: no hint at all.
			send("decode-1")
			if diff := cmp.Diff(caller, string(plain.last(t))); diff != "" {
				t.Errorf("a worker without router_hint got another body (-sent +arrived):\n%s", diff)
			}
		})
	}
}

// TestBadTransferParams: a body whose kv_transfer_params is not an object
// is refused with 400, naming the field, and reaches no worker.
func TestBadTransferParams(t *testing.T) {
	capable := startEngine(t)
	workers := []Worker{{ID: "decode-0", URL: capable.URL, RouterHint: true}}
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: Capabilities(workers)})
	doc, err := os.ReadFile("testdata/hints.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Load(doc, "testdata/hints.yaml"); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(NewRouter("decode", workers, d))
	t.Cleanup(front.Close)
	req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/completions", strings.NewReader(`{"prompt":"p","kv_transfer_params":[1]}`))
	req.Header.Set("X-Session-Id", "s1")
	req.Header.Set("X-Session-Final", "true")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "kv_transfer_params") {
		t.Errorf("status %d %q, want 400 naming kv_transfer_params", resp.StatusCode, msg)
	}
	capable.mu.Lock()
	defer capable.mu.Unlock()
	if len(capable.bodies) != 0 {
		t.Errorf("the worker got %d requests", len(capable.bodies))
	}
}
