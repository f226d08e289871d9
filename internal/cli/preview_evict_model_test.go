package cli

import (
	"bufio"
	"container/heap"
	"container/list"
	"encoding/json"
	"os"
	"testing"
)

// An independent model of config/samples' chat router on the chained
// conversation trace, written apart from internal/preview: a plain LRU
// (container/list) with reference counts and retention pins per worker,
// the decode role's Dynamo default cost function (overlap_score_credit
// 2), kv.retain (600 s, prompts of 512 tokens or more) on every turn but
// a session's last and kv.evict on its last, both when the request
// completes. It checks preview's figures for kv-evict under both
// --evict-in-use settings, and shows what the sign rests on.

// imRow is one row of the chained trace.
type imRow struct {
	At      float64  `json:"timestamp"`
	In      int      `json:"input_length"`
	Out     int      `json:"output_length"`
	Hashes  []uint64 `json:"hash_ids"`
	Session string   `json:"session_id"`
	final   bool
}

// imOptions are the model's semantics.
type imOptions struct {
	evict bool // kv.evict on final turns (base) or not (head)
	// keepInUse: kv.evict leaves a block another active request reads.
	keepInUse bool
	// keepReadLater: kv.evict also leaves a block a request arriving
	// after it reads: final turns whose blocks are dead. An oracle, not
	// an engine: it shows what the sign rests on.
	keepReadLater bool
}

type imResult struct {
	prompt, cached, evicted, kept int
	ttftSum                       float64
}

func (r imResult) hit() float64 { return float64(r.cached) / float64(r.prompt) }

type imBlock struct {
	el    *list.Element // in the LRU: no reader, no pin
	refs  int
	until float64 // pin end (ms), 0 when not pinned
}

type imPin struct {
	at   float64
	hash uint64
}

type imPins []imPin

func (h imPins) Len() int { return len(h) }
func (h imPins) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].hash < h[j].hash
}
func (h imPins) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *imPins) Push(x any)   { *h = append(*h, x.(imPin)) }
func (h *imPins) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}

type imWorker struct {
	blocks map[uint64]*imBlock
	lru    *list.List // front: most recently used
	pins   imPins
	busy   float64
	active int // blocks of active requests
}

func (w *imWorker) free(b *imBlock) bool { return b.refs == 0 && b.until == 0 }

func (w *imWorker) touch(h uint64, b *imBlock) {
	if b.el != nil {
		w.lru.Remove(b.el)
	}
	b.el = w.lru.PushFront(h)
}

func (w *imWorker) unlru(b *imBlock) {
	if b.el != nil {
		w.lru.Remove(b.el)
		b.el = nil
	}
}

// unpin ends the pins due by now, in order of their end.
func (w *imWorker) unpin(now float64) {
	for len(w.pins) > 0 && w.pins[0].at <= now {
		p := heap.Pop(&w.pins).(imPin)
		if b := w.blocks[p.hash]; b != nil && b.until == p.at {
			b.until = 0
			if b.refs == 0 {
				w.touch(p.hash, b)
			}
		}
	}
}

type imDone struct {
	at     float64
	seq    int
	w      *imWorker
	hashes []uint64
	reads  []uint64
	blocks int
	retain bool
	evict  bool
}

type imDones []imDone

func (h imDones) Len() int { return len(h) }
func (h imDones) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h imDones) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *imDones) Push(x any)   { *h = append(*h, x.(imDone)) }
func (h *imDones) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}

func independentEvictModel(rows []imRow, workers, capacity int, o imOptions) imResult {
	const (
		bs        = 512
		prefillMS = 0.05
		decodeMS  = 20.0
		ttlMS     = 600_000.0
		credit    = 2.0
	)
	lastRead := map[uint64]float64{}
	for _, r := range rows {
		for _, h := range r.Hashes {
			lastRead[h] = r.At
		}
	}
	ws := make([]*imWorker, workers)
	for i := range ws {
		ws[i] = &imWorker{blocks: map[uint64]*imBlock{}, lru: list.New()}
	}
	var res imResult
	var dones imDones
	seq := 0
	complete := func(d imDone) {
		w := d.w
		w.unpin(d.at)
		w.active -= d.blocks
		for _, h := range d.reads {
			b := w.blocks[h]
			b.refs--
			if w.free(b) {
				w.touch(h, b)
			}
		}
		if d.retain {
			for _, h := range d.hashes {
				if b := w.blocks[h]; b != nil {
					w.unlru(b)
					b.until = d.at + ttlMS
					heap.Push(&w.pins, imPin{b.until, h})
				}
			}
		}
		if d.evict {
			for _, h := range d.hashes {
				b := w.blocks[h]
				if b == nil {
					continue
				}
				if o.keepInUse && b.refs > 0 || o.keepReadLater && lastRead[h] > d.at {
					res.kept++
					continue
				}
				w.unlru(b)
				delete(w.blocks, h)
				res.evicted++
			}
		}
	}
	for _, r := range rows {
		for len(dones) > 0 && dones[0].at <= r.At {
			complete(heap.Pop(&dones).(imDone))
		}
		var pick *imWorker
		best := 0.0
		for _, w := range ws {
			w.unpin(r.At)
			ov := 0
			for _, h := range r.Hashes {
				if w.blocks[h] == nil {
					break
				}
				ov++
			}
			logit := max(0, float64(w.active+len(r.Hashes)-ov)-credit*float64(ov))
			if pick == nil || logit < best {
				pick, best = w, logit
			}
		}
		w := pick
		cached := 0
		for _, h := range r.Hashes {
			b := w.blocks[h]
			if b == nil {
				break
			}
			cached++
			if w.free(b) {
				w.touch(h, b)
			}
		}
		for _, h := range r.Hashes[cached:] {
			if w.blocks[h] != nil {
				continue
			}
			if len(w.blocks) >= capacity {
				back := w.lru.Back()
				if back == nil {
					continue // every block read or pinned
				}
				victim := back.Value.(uint64)
				w.unlru(w.blocks[victim])
				delete(w.blocks, victim)
			}
			b := &imBlock{}
			w.blocks[h] = b
			w.touch(h, b)
		}
		var reads []uint64
		if o.keepInUse {
			for _, h := range r.Hashes {
				if b := w.blocks[h]; b != nil {
					w.unlru(b)
					b.refs++
					reads = append(reads, h)
				}
			}
		}
		res.prompt += len(r.Hashes)
		res.cached += cached
		start := max(r.At, w.busy)
		end := start + float64(max(0, r.In-cached*bs))*prefillMS
		w.busy = end
		res.ttftSum += end - r.At
		blocks := len(r.Hashes) + (r.Out+bs-1)/bs
		w.active += blocks
		seq++
		heap.Push(&dones, imDone{at: end + float64(r.Out)*decodeMS, seq: seq, w: w, hashes: r.Hashes, reads: reads, blocks: blocks,
			retain: !r.final && r.In >= 512, evict: o.evict && r.final})
	}
	for len(dones) > 0 {
		complete(heap.Pop(&dones).(imDone))
	}
	return res
}

func readChained(t *testing.T, path string) []imRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []imRow
	last := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var r imRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		last[r.Session] = len(rows)
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, i := range last {
		rows[i].final = true
	}
	return rows
}

// preview's kv-evict figures on the chained conversation trace agree with
// the independent model's, to the block, under each --evict-in-use
// setting. kv-evict gains hit ratio only under oracle, where the final
// turns' blocks no later row reads are the only ones freed: the chained
// sessions' final turns share blocks beyond the system prompt with later
// rows, which begin sessions of their own.
func TestPreviewEvictIndependentModel(t *testing.T) {
	tr := chainedConversation(t)
	head := withoutEvict(t)
	rows := readChained(t, tr)
	noEvict := independentEvictModel(rows, 8, 4096, imOptions{keepInUse: true})
	for _, mode := range []string{"free", "keep", "oracle"} {
		code, out, errOut := runCLI("preview", "--trace", tr, "--base", "../../config/samples", "--head", head,
			"--router", "chat", "--evict-in-use", mode, "--sensitivity=false", "--windows", "0", "-o", "json")
		if code != PreviewDiffers && code != PreviewCannotTell {
			t.Fatalf("--evict-in-use %s: exit %d\n%s", mode, code, errOut)
		}
		var r struct {
			Roles []struct {
				Base, Head struct {
					Cached  int     `json:"cached_blocks"`
					Prompt  int     `json:"prompt_blocks"`
					TTFT    float64 `json:"ttft_mean_ms"`
					Evicted int     `json:"evicted_blocks"`
					Kept    int     `json:"evict_kept_in_use"`
				}
			} `json:"roles"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		p := r.Roles[0]
		keep := mode != "free"
		base := independentEvictModel(rows, 8, 4096, imOptions{evict: true, keepInUse: keep, keepReadLater: mode == "oracle"})
		hd := independentEvictModel(rows, 8, 4096, imOptions{keepInUse: keep})
		n := float64(len(rows))
		t.Logf("--evict-in-use %s: preview kv-evict %+.2f pp, TTFT %+.1f ms; independent %+.2f pp, TTFT %+.1f ms",
			mode, 100*(float64(p.Base.Cached)/float64(p.Base.Prompt)-float64(p.Head.Cached)/float64(p.Head.Prompt)), p.Base.TTFT-p.Head.TTFT,
			100*(base.hit()-hd.hit()), (base.ttftSum-hd.ttftSum)/n)
		if p.Base.Cached != base.cached || p.Head.Cached != hd.cached || p.Base.Prompt != base.prompt ||
			p.Base.Evicted != base.evicted || p.Base.Kept != base.kept {
			t.Errorf("--evict-in-use %s: preview base cached %d, head cached %d, prompt %d, evicted %d, kept %d; independent %d, %d, %d, %d, %d",
				mode, p.Base.Cached, p.Head.Cached, p.Base.Prompt, p.Base.Evicted, p.Base.Kept, base.cached, hd.cached, base.prompt, base.evicted, base.kept)
		}
		if keep && hd != noEvict {
			t.Errorf("head under keep %+v, want %+v", hd, noEvict)
		}
	}
	oracle := independentEvictModel(rows, 8, 4096, imOptions{evict: true, keepInUse: true, keepReadLater: true})
	if oracle.hit() <= noEvict.hit() {
		t.Errorf("with final turns' blocks dead, kv-evict changes the hit ratio by %+.2f pp; want a gain", 100*(oracle.hit()-noEvict.hit()))
	}
}
