package simworker

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// prompt is a prompt of n blocks of the default block size whose blocks
// are block i of the seed's sequence: prompts of one seed share their
// prefix, up to the shorter one's end.
func prompt(seed string, n int) string {
	var b strings.Builder
	for i := range n {
		blk := fmt.Sprintf("%s block %d ", seed, i)
		b.WriteString(blk + strings.Repeat(".", DefaultBlockSize*BytesPerToken-len(blk)))
	}
	return b.String()
}

// completion is what a test reads of a completion answer.
type completion struct {
	prompt, cached int
	ttft           time.Duration
}

func complete(t *testing.T, url, body string) completion {
	t.Helper()
	resp, err := http.Post(url+CompletionsPath, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %s: %s", resp.Status, raw)
	}
	var ans struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		t.Fatal(err)
	}
	var ttft time.Duration
	if v := resp.Header.Get(HeaderTTFT); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", HeaderTTFT, v, err)
		}
		ttft = time.Duration(s * float64(time.Second))
	}
	return completion{ans.Usage.PromptTokens, ans.Usage.PromptTokensDetails.CachedTokens, ttft}
}

func body(text string) string {
	b, _ := json.Marshal(map[string]string{"model": "m", "prompt": text})
	return string(b)
}

// fetchHint is an in-band hint with one kv.fetch of the blocks.
func fetchHint(id string, blocks []uint64) string {
	b, _ := json.Marshal(blocks)
	return `{"protocol_version":"0.1","message_id":"` + id + `","actions":[` +
		action(1, "kv.fetch", `{"block_hashes":`+string(b)+`,"source_control_endpoint":"tcp://w2:1"}`) + `]}`
}

func startCacheWorker(t *testing.T, o Options) *Server {
	t.Helper()
	s, err := Start(New(o), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPrefixCache plants prefixes on a worker over HTTP: a prompt whose
// first blocks it served before is answered with those blocks' tokens
// cached, a new one with none, and the time to first token grows with
// the tokens not cached.
func TestPrefixCache(t *testing.T) {
	s := startCacheWorker(t, Options{ID: "w", TTFTPerToken: 10 * time.Microsecond, TTFTMax: time.Second})
	bs := DefaultBlockSize

	first := complete(t, s.URL, body(prompt("a", 10)))
	if first.prompt != 10*bs || first.cached != 0 {
		t.Errorf("first prompt: %d tokens, %d cached; want %d, 0", first.prompt, first.cached, 10*bs)
	}
	// 6 blocks of the first, then 4 of its own.
	next := complete(t, s.URL, body(prompt("a", 6)+prompt("b", 4)))
	if next.cached != 6*bs {
		t.Errorf("a prompt sharing 6 blocks: %d cached, want %d", next.cached, 6*bs)
	}
	again := complete(t, s.URL, body(prompt("a", 10)+"tail"))
	if again.cached != 10*bs || again.prompt != 10*bs+1 {
		t.Errorf("the first prompt and a partial block: %d of %d tokens cached, want %d of %d", again.cached, again.prompt, 10*bs, 10*bs+1)
	}
	other := complete(t, s.URL, body(prompt("c", 10)))
	if other.cached != 0 {
		t.Errorf("a prompt sharing no block: %d cached, want 0", other.cached)
	}
	// 160 uncached tokens at 10 µs each; 1 uncached token.
	if first.ttft != 1600*time.Microsecond || again.ttft != 10*time.Microsecond {
		t.Errorf("time to first token: %v uncached, %v cached; want 1.6ms and 10µs", first.ttft, again.ttft)
	}
	if st := s.CachedTokens(); st != int64(6*bs+10*bs) {
		t.Errorf("worker counted %d cached tokens, want %d", st, 16*bs)
	}
}

// TestPrefixCacheFetch: a kv.fetch carried in-band brings the copy's
// blocks in before the prompt is measured, so a prefix the worker never
// served counts as cached; without the fetch it does not.
func TestPrefixCacheFetch(t *testing.T) {
	text := prompt("s", 8)
	hashes := BlockHashes(text, DefaultBlockSize)
	if len(hashes) != 8 {
		t.Fatalf("%d block hashes of an 8-block prompt", len(hashes))
	}

	without := startCacheWorker(t, Options{ID: "w1"})
	if got := complete(t, without.URL, body(text)); got.cached != 0 {
		t.Errorf("no fetch: %d cached, want 0", got.cached)
	}

	with := startCacheWorker(t, Options{ID: "w2"})
	carried, err := dispatch.CarryHint([]byte(body(text)), []byte(fetchHint("f1", hashes[:5])), dispatch.InBandKVHint)
	if err != nil {
		t.Fatal(err)
	}
	if got := complete(t, with.URL, string(carried)); got.cached != 5*DefaultBlockSize {
		t.Errorf("a fetch of the first 5 blocks: %d cached, want %d", got.cached, 5*DefaultBlockSize)
	}

	// A fetch of blocks that are not the prompt's prefix serves nothing.
	late := startCacheWorker(t, Options{ID: "w3"})
	carried, err = dispatch.CarryHint([]byte(body(text)), []byte(fetchHint("f2", hashes[2:])), dispatch.InBandKVHint)
	if err != nil {
		t.Fatal(err)
	}
	if got := complete(t, late.URL, string(carried)); got.cached != 0 {
		t.Errorf("a fetch of blocks 3 to 8 without the first two: %d cached, want 0", got.cached)
	}
}

// TestPrefixCacheCapacity: past its capacity the least recently used
// blocks go, and the TTFT stops at its bound.
func TestPrefixCacheCapacity(t *testing.T) {
	s := startCacheWorker(t, Options{ID: "w", CacheBlocks: 4, TTFTPerToken: time.Millisecond, TTFTMax: 3 * time.Millisecond})
	small := complete(t, s.URL, body(prompt("x", 3)))
	if got := complete(t, s.URL, body(prompt("x", 3))); got.cached != 3*DefaultBlockSize {
		t.Errorf("3 blocks in a 4-block cache: %d cached, want %d", got.cached, 3*DefaultBlockSize)
	}
	complete(t, s.URL, body(prompt("y", 10)))
	if got := complete(t, s.URL, body(prompt("y", 10))); got.cached != 0 {
		t.Errorf("10 blocks through a 4-block cache: %d cached, want 0 (the first blocks were evicted)", got.cached)
	}
	if small.ttft != 3*time.Millisecond {
		t.Errorf("TTFT of 48 uncached tokens at 1ms each, at most 3ms: %v", small.ttft)
	}
	var st Status
	resp, err := http.Get(s.URL + "/hints")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.CacheBlocks != 4 || st.Requests != 4 {
		t.Errorf("status: %d blocks cached, %d requests; want 4, 4", st.CacheBlocks, st.Requests)
	}
}
