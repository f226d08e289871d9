package simworker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// HeaderHintPath, on a completion answer, names the path the request's
// in-band hint was read at; absent when the request carried none.
const HeaderHintPath = "Simworker-Hint-Path"

// InBandHint finds the hint a completion request carries, at any of the
// paths engines read one (dispatch.InBandPath), and returns its bytes as
// carried and the path; nil when the request carries none. A null value
// counts as absent. It is an error when the body is not a JSON object,
// when its kv_transfer_params is neither an object nor null, and when
// hints are carried at more than one path: an engine reads one.
func InBandHint(body []byte) (json.RawMessage, dispatch.InBandPath, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, 0, fmt.Errorf("request body must be a JSON object: %w", err)
	}
	var params map[string]json.RawMessage
	if raw := top["kv_transfer_params"]; len(raw) > 0 && !isNull(raw) {
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, 0, fmt.Errorf("kv_transfer_params must be a JSON object: %w", err)
		}
	}
	var (
		found []dispatch.InBandPath
		hint  json.RawMessage
	)
	for _, c := range []struct {
		path dispatch.InBandPath
		raw  json.RawMessage
	}{
		{dispatch.InBandKVHint, params["kv_hint"]},
		{dispatch.InBandKVHints, top["kv_hints"]},
		{dispatch.InBandRouterHint, params["router_hint"]},
	} {
		if len(c.raw) > 0 && !isNull(c.raw) {
			found = append(found, c.path)
			hint = c.raw
		}
	}
	switch len(found) {
	case 0:
		return nil, 0, nil
	case 1:
		return hint, found[0], nil
	}
	return nil, 0, fmt.Errorf("hints carried at both %s and %s: an engine reads one", found[0], found[1])
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// HeaderTTFT, on a completion answer, is the simulated time to the first
// token the worker waited, in seconds.
const HeaderTTFT = "Simworker-Ttft-Seconds"

// completionRequest is what the worker reads of a completion request
// besides its hint.
type completionRequest struct {
	Model string `json:"model"`
	// Prompt (completions) or the messages' contents (chat) are the
	// prompt's text.
	Prompt   string `json:"prompt"`
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
	KVTransferParams *struct {
		DoRemoteDecode bool `json:"do_remote_decode"`
	} `json:"kv_transfer_params"`
}

// complete serves a completion request: it takes the hint carried in-band,
// if any, checked as a pushed one is, and answers a small completion in
// the OpenAI shape of the route, its usage counting the prompt tokens
// served from the prefix cache (usage.prompt_tokens_details.cached_tokens),
// after a simulated time to first token. A request that asks for a remote
// decode (kv_transfer_params.do_remote_decode) is answered, as a prefill
// worker answers it, with the transfer parameters its decode worker needs.
func (w *Worker) complete(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxRequestBytes))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	hint, path, err := InBandHint(body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	var req completionRequest
	// InBandHint has read body as an object; a field of another type is
	// the caller's business, not the worker's.
	_ = json.Unmarshal(body, &req)
	var results *Results
	if hint != nil {
		if results = w.takeInBand(rw, hint, path); results == nil {
			return
		}
		rw.Header().Set(HeaderHintPath, path.String())
	}

	text := req.Prompt
	for _, m := range req.Messages {
		text += m.Content
	}
	prompt, cached := PromptTokens(text), 0
	hashes := BlockHashes(text, w.opts.BlockSize)
	w.mu.Lock()
	w.requests++
	n := w.requests
	if w.cache != nil {
		// Served from the longest cached prefix; the request leaves all
		// its blocks cached.
		cached = min(w.cache.prefix(hashes)*w.opts.BlockSize, prompt)
		w.cache.insert(hashes)
	}
	w.promptTokens += int64(prompt)
	w.cachedTokens += int64(cached)
	w.mu.Unlock()
	if ttft := w.opts.ttft(prompt - cached); ttft > 0 {
		select {
		case <-time.After(ttft):
		case <-r.Context().Done():
			return
		}
		rw.Header().Set(HeaderTTFT, strconv.FormatFloat(ttft.Seconds(), 'f', -1, 64))
	}
	id := w.opts.ID + "-" + strconv.FormatInt(n, 10)
	ans := map[string]any{
		"id":      "cmpl-" + id,
		"created": time.Now().Unix(),
		"model":   req.Model,
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1,
			"prompt_tokens_details": map[string]int{"cached_tokens": cached}},
	}
	if r.URL.Path == ChatCompletionsPath {
		ans["object"] = "chat.completion"
		ans["choices"] = []any{map[string]any{"index": 0, "finish_reason": "length",
			"message": map[string]string{"role": "assistant", "content": "ok"}}}
	} else {
		ans["object"] = "text_completion"
		ans["choices"] = []any{map[string]any{"index": 0, "finish_reason": "length", "text": "ok"}}
	}
	if results != nil && results.Results != nil {
		// What became of the hint's actions, as vLLM reports them.
		ans["kv_hint_results"] = results
	}
	if req.KVTransferParams != nil && req.KVTransferParams.DoRemoteDecode {
		ans["kv_transfer_params"] = map[string]any{"do_remote_prefill": true, "do_remote_decode": false,
			"remote_engine_id": w.opts.ID, "remote_request_id": id}
	}
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(ans)
}

// takeInBand checks and records an in-band hint and returns its results,
// or counts it rejected, answers 400 and returns nil when it breaks the
// wire format. A sink counts it unchecked, with no results.
func (w *Worker) takeInBand(rw http.ResponseWriter, hint json.RawMessage, path dispatch.InBandPath) *Results {
	if w.opts.Sink {
		w.mu.Lock()
		w.inBand.accepted++
		w.wakeLocked()
		w.mu.Unlock()
		return &Results{}
	}
	m, err := CheckMessage(hint)
	if err != nil {
		w.reject(&w.inBand)
		writeResults(rw, http.StatusBadRequest, rejected(fmt.Errorf("in-band hint at %s: %w", path, err)))
		return nil
	}
	res := w.take(&w.inBand, m, Received{At: time.Now(), MessageID: m.MessageID, Body: hint, Path: path.String()})
	return &res
}
