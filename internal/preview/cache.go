package preview

import "container/heap"

// blockCache is one worker's KV block cache: LRU over the blocks that are
// not retained; a retained block (kv.retain) is out of the LRU until its
// TTL ends, then goes back to it. Capacity counts both.
//
// A reference-counted cache (EvictKeep, as vLLM's and SGLang's) also
// keeps out of the LRU every block an active request reads: it can be
// neither replaced nor evicted until the last of its readers completes.
type blockCache struct {
	capacity int
	// refcounted is set under EvictKeep and EvictOracle.
	refcounted bool
	// readUntil, under EvictOracle, is the arrival (ms) of the last row
	// of the trace that reads each block: kv.evict leaves a block read
	// after now.
	readUntil map[uint64]float64
	blocks    map[uint64]*block
	// head is the most recently used unretained block, tail the least.
	head, tail *block
	lru        int // blocks in the LRU list
	expiries   expiryHeap
	stats      *RoleStats
}

type block struct {
	hash       uint64
	prev, next *block
	// until is the end of the block's retention (ms), 0 when it is not
	// retained.
	until float64
	// retainedUnread is set from a retention until the block is read.
	retainedUnread bool
	// fetchedUnread is set from a kv.fetch until the block is read.
	fetchedUnread bool
	// refs counts the active requests reading the block (refcounted
	// caches only).
	refs int32
}

// inLRU is whether the block is in the LRU list: not retained, not read.
func (b *block) inLRU() bool { return b.until == 0 && b.refs == 0 }

// acquire marks the cached blocks of hashes as read by one more active
// request (refcounted caches only) and returns them, for release.
func (c *blockCache) acquire(hashes []uint64) []*block {
	if !c.refcounted {
		return nil
	}
	out := make([]*block, 0, len(hashes))
	for _, h := range hashes {
		b := c.blocks[h]
		if b == nil {
			continue
		}
		if b.inLRU() {
			c.unlink(b)
		}
		b.refs++
		out = append(out, b)
	}
	return out
}

// release ends one reader of each block; a block no one reads and no
// retention holds goes back to the LRU as its most recent entry.
func (c *blockCache) release(bs []*block) {
	for _, b := range bs {
		b.refs--
		if b.inLRU() {
			c.pushFront(b)
		}
	}
}

func newBlockCache(capacity int, stats *RoleStats) *blockCache {
	return &blockCache{capacity: capacity, blocks: map[uint64]*block{}, stats: stats}
}

// expire ends the retentions due by now: their blocks go back to the LRU
// as its most recent entries.
func (c *blockCache) expire(now float64) {
	for len(c.expiries) > 0 && c.expiries[0].at <= now {
		e := heap.Pop(&c.expiries).(expiry)
		b := c.blocks[e.hash]
		if b == nil || b.until != e.at {
			continue // evicted, or retained again since
		}
		b.until = 0
		if b.retainedUnread {
			b.retainedUnread = false
			c.stats.RetainedExpiredUnused++
		}
		if b.refs == 0 {
			c.pushFront(b)
		}
	}
}

// prefix returns how many of hashes, from the first, the cache holds: a
// prefix cache serves a block only when it serves every block before it.
// The blocks read become the most recently used.
func (c *blockCache) prefix(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		b := c.blocks[h]
		if b == nil {
			break
		}
		n++
		if b.fetchedUnread {
			b.fetchedUnread = false
			c.stats.FetchedUsed++
		}
		if b.retainedUnread {
			b.retainedUnread = false
			c.stats.RetainedReused++
		}
		if b.inLRU() {
			c.unlink(b)
			c.pushFront(b)
		}
	}
	return n
}

// peek is prefix without reading: the worker-selection model's look.
func (c *blockCache) peek(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if c.blocks[h] == nil {
			break
		}
		n++
	}
	return n
}

func (c *blockCache) has(h uint64) bool { return c.blocks[h] != nil }

// insert adds a block computed or fetched on the worker, evicting the
// least recently used unretained block when full. It reports whether the
// block is in the cache afterwards: with every block retained there is
// no room, and the block is not kept.
func (c *blockCache) insert(h uint64, fetched bool) bool {
	if b := c.blocks[h]; b != nil {
		return true
	}
	if c.capacity <= 0 {
		return false
	}
	if len(c.blocks) >= c.capacity {
		if c.tail == nil {
			return false
		}
		c.drop(c.tail)
	}
	b := &block{hash: h, fetchedUnread: fetched}
	c.blocks[h] = b
	c.pushFront(b)
	return true
}

// retain keeps the blocks for ttl ms from now; it reports how many were
// retained (those still cached).
func (c *blockCache) retain(hashes []uint64, now, ttl float64) int {
	n := 0
	for _, h := range hashes {
		b := c.blocks[h]
		if b == nil {
			continue
		}
		if b.inLRU() {
			c.unlink(b)
		}
		if b.retainedUnread {
			c.stats.RetainedExpiredUnused++ // the retention it renews ends unread
		}
		b.until = now + ttl
		b.retainedUnread = true
		heap.Push(&c.expiries, expiry{at: b.until, hash: h})
		n++
	}
	return n
}

// evict frees the blocks (kv.evict) at now; it returns the hashes it
// freed. In a refcounted cache a block another active request reads
// stays, and counts in kept; so does, under EvictOracle, a block a row
// arriving after now reads.
func (c *blockCache) evict(hashes []uint64, now float64) (freed []uint64, kept int) {
	for _, h := range hashes {
		if b := c.blocks[h]; b != nil {
			if b.refs > 0 || c.readUntil != nil && c.readUntil[h] > now {
				kept++
				continue
			}
			c.drop(b)
			freed = append(freed, h)
		}
	}
	return freed, kept
}

// drop removes a block, counting what it leaves unused.
func (c *blockCache) drop(b *block) {
	if b.inLRU() {
		c.unlink(b)
	}
	if b.fetchedUnread {
		c.stats.FetchedWasted++
	}
	if b.retainedUnread {
		c.stats.RetainedExpiredUnused++
	}
	delete(c.blocks, b.hash)
}

// finish counts what is left unused when the trace ends.
func (c *blockCache) finish() {
	for _, b := range c.blocks {
		if b.fetchedUnread {
			c.stats.FetchedWasted++
		}
		if b.retainedUnread {
			c.stats.RetainedExpiredUnused++
		}
	}
}

func (c *blockCache) pushFront(b *block) {
	b.prev, b.next = nil, c.head
	if c.head != nil {
		c.head.prev = b
	}
	c.head = b
	if c.tail == nil {
		c.tail = b
	}
	c.lru++
}

func (c *blockCache) unlink(b *block) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		c.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next = nil, nil
	c.lru--
}

type expiry struct {
	at   float64
	hash uint64
}

type expiryHeap []expiry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].hash < h[j].hash
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
