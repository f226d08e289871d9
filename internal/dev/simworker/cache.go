package simworker

import (
	"container/list"
	"encoding/binary"
	"encoding/json"
	"time"
)

// Defaults of a worker's simulated prefix cache and time to first token.
const (
	// DefaultCacheBlocks is the cache's capacity in KV blocks.
	DefaultCacheBlocks = 16384
	// DefaultBlockSize is the tokens per KV block, the dev front router's.
	DefaultBlockSize = 16
	// DefaultTTFTPerToken is the prefill time of one uncached prompt
	// token, DefaultTTFTMax the most a request waits for its first token:
	// small, so that tests and the dev environment stay quick, yet a
	// prompt served from the cache answers measurably sooner.
	DefaultTTFTPerToken = 2 * time.Microsecond
	DefaultTTFTMax      = 50 * time.Millisecond
)

// BytesPerToken stands in for a tokenizer: four bytes of prompt text a
// token, as the dev front router counts them.
const BytesPerToken = 4

// PromptTokens is the prompt length in tokens of a prompt's text: at
// least 1, as the dev front router books it.
func PromptTokens(text string) int { return max(len(text)/BytesPerToken, 1) }

// BlockHashes are the KV block hashes of a prompt's text: one per full
// block of blockSize tokens, each chained on the one before (FNV-1a over
// the previous hash and the block's bytes), so that two prompts share a
// block's hash only when they share the whole prefix up to its end, as an
// engine's prefix cache keys its blocks.
func BlockHashes(text string, blockSize int) []uint64 {
	n := blockSize * BytesPerToken
	if n <= 0 {
		return nil
	}
	out := make([]uint64, 0, len(text)/n)
	var prev uint64
	for i := 0; i+n <= len(text); i += n {
		const offset, prime = 14695981039346656037, 1099511628211
		h := uint64(offset)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], prev)
		for _, c := range b {
			h = (h ^ uint64(c)) * prime
		}
		for j := i; j < i+n; j++ {
			h = (h ^ uint64(text[j])) * prime
		}
		out = append(out, h)
		prev = h
	}
	return out
}

// prefixCache is a worker's simulated prefix cache: the KV blocks it
// holds, by hash, least recently used evicted first past its capacity.
// A request is served from the longest prefix of its blocks the cache
// holds, and leaves all of its blocks cached; a kv.fetch brings the
// fetched copy's blocks in. The worker's mutex guards it.
type prefixCache struct {
	capacity int
	blocks   map[uint64]*list.Element
	// lru holds the hashes, most recently used at the front.
	lru list.List
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, blocks: map[uint64]*list.Element{}}
}

// insert caches the blocks, each as the most recently used, evicting the
// least recently used past the capacity.
func (c *prefixCache) insert(hashes []uint64) {
	for _, h := range hashes {
		if e, ok := c.blocks[h]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.blocks[h] = c.lru.PushFront(h)
		if c.lru.Len() > c.capacity {
			old := c.lru.Back()
			c.lru.Remove(old)
			delete(c.blocks, old.Value.(uint64))
		}
	}
}

// prefix counts the leading blocks of hashes the cache holds.
func (c *prefixCache) prefix(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			break
		}
		n++
	}
	return n
}

// reset empties the cache.
func (c *prefixCache) reset() {
	clear(c.blocks)
	c.lru.Init()
}

// fetchedBlocks are the block hashes of a message's kv.fetch actions,
// which CheckMessage has checked.
func fetchedBlocks(m *Message) []uint64 {
	var out []uint64
	for _, a := range m.Actions {
		if a.ActionType != "kv.fetch" {
			continue
		}
		var f struct {
			BlockHashes []uint64 `json:"block_hashes"`
		}
		if json.Unmarshal(a.Payload, &f) == nil {
			out = append(out, f.BlockHashes...)
		}
	}
	return out
}

// ttft is the simulated time to the first token of a prompt of which
// uncached tokens were not served from the cache.
func (o *Options) ttft(uncached int) time.Duration {
	return min(time.Duration(uncached)*o.TTFTPerToken, o.TTFTMax)
}
