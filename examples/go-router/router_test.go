package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/router"
)

// engine is a worker on loopback that records the request bodies it gets.
type engine struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]json.RawMessage
}

func startEngine(t *testing.T) *engine {
	e := &engine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
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

func (e *engine) last(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.bodies) == 0 {
		t.Fatal("the worker got no request")
	}
	return e.bodies[len(e.bodies)-1]
}

// TestHintInBand: a request through the router reaches its booked worker
// with the hint under kv_transfer_params.router_hint, exactly as the
// dispatcher built it, beside the caller's own transfer parameters; a
// worker without router_hint gets the request untouched.
func TestHintInBand(t *testing.T) {
	capable, plain := startEngine(t), startEngine(t)
	workers := []Worker{{ID: "decode-0", URL: capable.URL, RouterHint: true}, {ID: "decode-1", URL: plain.URL}}
	doc, err := os.ReadFile("testdata/hints.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := router.NewDispatcher(router.Options{Catalog: builtin.NewCatalog(), Workers: Capabilities(workers)})
	if err := d.Load(doc, "testdata/hints.yaml"); err != nil {
		t.Fatal(err)
	}
	rt := NewRouter("decode", workers, d)
	rt.next.Store(uint64(len(workers) - 1)) // the first booking goes to decode-0
	front := httptest.NewServer(rt)
	t.Cleanup(front.Close)

	send := func(worker string, kvTransfer string) {
		t.Helper()
		body := `{"model":"llama","prompt":"` + string(bytes.Repeat([]byte("x"), 4096)) + `","max_tokens":8` + kvTransfer + `}`
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/completions", bytes.NewReader([]byte(body)))
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

	send("decode-0", `,"kv_transfer_params":{"do_remote_prefill":true}`)
	got := capable.last(t)
	var params map[string]json.RawMessage
	if err := json.Unmarshal(got["kv_transfer_params"], &params); err != nil {
		t.Fatalf("kv_transfer_params: %v: %s", err, got["kv_transfer_params"])
	}
	wantHint := `{"protocol_version":"0.1","message_id":"r-decode-0","actions":[` +
		`{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,18446744073709551615],"source_control_endpoint":"tcp://10.0.0.7:23280"}},` +
		`{"action_id":"a2","action_type":"kv.evict","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true}}]}`
	if string(params["router_hint"]) != wantHint {
		t.Errorf("router_hint\n%s\nwant\n%s", params["router_hint"], wantHint)
	}
	if string(params["do_remote_prefill"]) != "true" {
		t.Errorf("the caller's kv_transfer_params were lost: %s", got["kv_transfer_params"])
	}
	if string(got["model"]) != `"llama"` || string(got["max_tokens"]) != "8" {
		t.Errorf("other fields were not forwarded untouched: %v", got)
	}

	send("decode-1", "")
	if _, ok := plain.last(t)["kv_transfer_params"]; ok {
		t.Errorf("a worker without router_hint got kv_transfer_params: %s", plain.last(t)["kv_transfer_params"])
	}
}
