// Package record is the sidecar's opt-in trace recorder: it samples the
// bookings the booking API answers and writes them as a trace that
// `kvhint preview` replays (one JSON object a line: the booking's role,
// worker, prompt length, block size, session turn, committed copy and the
// actions answered).
//
// Privacy: a booking carries no request text. The recorder keeps only the
// sharing structure of the rest: block hashes, session IDs and request IDs
// are replaced by keyed hashes (HMAC-SHA256 under a key drawn per
// recording), so equal values stay equal within a recording and nothing
// else can be read back; a copy's source endpoint (an address) is dropped.
//
// It never blocks a booking: Record hands the booking to a bounded queue
// and, when the queue is full, drops it and counts the drop. It imports
// pkg/router and prometheus, nothing else of the sidecar.
package record

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/pkg/router"
)

// Defaults of Options.
const (
	DefaultQueue    = 1024
	DefaultMaxBytes = 64 << 20
	DefaultMaxFiles = 3
)

// Options configure a Recorder.
type Options struct {
	// Path is the trace file; rotated files are Path.1, Path.2, ...
	Path string
	// SampleRate is the share of requests recorded, in (0, 1]. The choice
	// is by request ID, so every role of a request is recorded or none.
	SampleRate float64
	// MaxBytes is the size at which the file is rotated; 0 means
	// DefaultMaxBytes.
	MaxBytes int64
	// MaxFiles is how many rotated files are kept besides Path; 0 means
	// DefaultMaxFiles.
	MaxFiles int
	// Queue is how many bookings may wait for the writer; 0 means
	// DefaultQueue. A booking that finds it full is dropped and counted.
	Queue int
	// Key is the remapping key; nil draws one at random, so that two
	// recordings share nothing.
	Key []byte
	// Registerer receives the recorder's metrics; nil registers none.
	Registerer prometheus.Registerer
	Log        logr.Logger

	stopped bool // tests: no writer until start
}

// Recorder writes sampled bookings to a trace file.
type Recorder struct {
	o        Options
	key      []byte
	ch       chan entry
	done     chan struct{}
	start    time.Time
	rows     prometheus.Counter
	dropped  prometheus.Counter
	failed   prometheus.Counter
	drops    atomic.Int64
	closeMu  sync.RWMutex
	closed   bool
	file     *os.File
	w        *bufio.Writer
	written  int64
	writeErr error
}

type entry struct {
	at      time.Time
	b       router.Booking
	hashes  []uint64
	message []byte
}

// New opens the trace file and starts the writer.
func New(o Options) (*Recorder, error) {
	if o.Path == "" {
		return nil, errors.New("record: no trace file path")
	}
	if !(o.SampleRate > 0 && o.SampleRate <= 1) {
		return nil, fmt.Errorf("record: sample rate is %g; it must be above 0 and at most 1", o.SampleRate)
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	key := o.Key
	if key == nil {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("record: drawing the remapping key: %w", err)
		}
	}
	r := &Recorder{o: o, key: key, ch: make(chan entry, o.Queue), done: make(chan struct{}), start: time.Now(),
		rows:    prometheus.NewCounter(prometheus.CounterOpts{Name: "kvhint_sidecar_record_rows_total", Help: "Bookings written to the recorded trace."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvhint_sidecar_record_dropped_total", Help: "Sampled bookings the recorder dropped because its queue was full."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "kvhint_sidecar_record_write_errors_total", Help: "Bookings the recorder could not write (file errors)."}),
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{r.rows, r.dropped, r.failed} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("record: registering metrics: %w", err)
			}
		}
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	if !o.stopped {
		go r.run()
	}
	return r, nil
}

// newStopped is New without the writer, for tests that fill the queue.
func newStopped(o Options) (*Recorder, error) {
	o.stopped = true
	return New(o)
}

// Record samples one answered booking and, when sampled, queues it for
// the writer without waiting. The booking's slices are copied; the
// message is kept as is (a router.Hint's message never changes).
func (r *Recorder) Record(b *router.Booking, h router.Hint) {
	if !r.sampled(b.RequestID) {
		return
	}
	e := entry{at: time.Now(), b: *b, message: h.Message}
	if b.KVCopy != nil {
		c := *b.KVCopy
		e.hashes = append([]uint64(nil), c.BlockHashes...)
		c.BlockHashes = nil
		e.b.KVCopy = &c
	}
	r.closeMu.RLock()
	defer r.closeMu.RUnlock()
	if r.closed {
		return
	}
	select {
	case r.ch <- e:
	default:
		r.dropped.Inc()
		r.drops.Add(1)
	}
}

// Dropped is the number of sampled bookings dropped so far.
func (r *Recorder) Dropped() int64 { return r.drops.Load() }

// sampled decides by the request ID's keyed hash, so all roles of one
// request agree.
func (r *Recorder) sampled(id string) bool {
	if r.o.SampleRate >= 1 {
		return true
	}
	v := r.mac([]byte(id))
	return float64(v>>11)/float64(1<<53) < r.o.SampleRate
}

func (r *Recorder) mac(b []byte) uint64 {
	m := hmac.New(sha256.New, r.key)
	m.Write(b)
	return binary.BigEndian.Uint64(m.Sum(nil))
}

func (r *Recorder) remapHash(h uint64) uint64 {
	var b [9]byte
	b[0] = 'h'
	binary.BigEndian.PutUint64(b[1:], h)
	return r.mac(b[:])
}

func (r *Recorder) remapID(kind byte, s string) string {
	v := r.mac(append([]byte{kind}, s...))
	return hex.EncodeToString(binary.BigEndian.AppendUint64(nil, v))
}

// Close stops taking bookings, writes those queued and closes the file.
func (r *Recorder) Close() error {
	r.closeMu.Lock()
	if r.closed {
		r.closeMu.Unlock()
		return nil
	}
	r.closed = true
	close(r.ch)
	r.closeMu.Unlock()
	<-r.done
	err := r.w.Flush()
	if cerr := r.file.Close(); err == nil {
		err = cerr
	}
	return errors.Join(r.writeErr, err)
}

// Record must not be called after Close; the sidecar closes the recorder
// once its booking listener has stopped.
func (r *Recorder) run() {
	defer close(r.done)
	buf := make([]byte, 0, 4096)
	for e := range r.ch {
		buf = r.encode(buf[:0], &e)
		if err := r.write(buf); err != nil {
			r.failed.Inc()
			if r.writeErr == nil {
				r.writeErr = err
				r.o.Log.Error(err, "Cannot write the recorded trace; bookings are counted as write errors", "path", r.o.Path)
			}
			continue
		}
		r.rows.Inc()
	}
}

func (r *Recorder) open() error {
	f, err := os.OpenFile(r.o.Path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	r.file, r.w, r.written = f, bufio.NewWriterSize(f, 64<<10), 0
	return nil
}

// write appends a line, rotating the file first when it would pass
// MaxBytes: Path becomes Path.1, Path.1 Path.2, and so on up to MaxFiles.
func (r *Recorder) write(line []byte) error {
	if r.written > 0 && r.written+int64(len(line)) > r.o.MaxBytes {
		if err := r.w.Flush(); err != nil {
			return err
		}
		if err := r.file.Close(); err != nil {
			return err
		}
		for i := r.o.MaxFiles - 1; i >= 1; i-- {
			_ = os.Rename(r.o.Path+"."+strconv.Itoa(i), r.o.Path+"."+strconv.Itoa(i+1))
		}
		if err := os.Rename(r.o.Path, r.o.Path+".1"); err != nil {
			return err
		}
		if err := r.open(); err != nil {
			return err
		}
	}
	n, err := r.w.Write(line)
	r.written += int64(n)
	return err
}

type rowJSON struct {
	Timestamp int64     `json:"timestamp"`
	RequestID string    `json:"request_id"`
	Role      string    `json:"role"`
	Worker    string    `json:"worker"`
	Input     int       `json:"input_length"`
	BlockSize int       `json:"block_size,omitempty"`
	Session   string    `json:"session_id,omitempty"`
	Turn      int       `json:"turn,omitempty"`
	Final     *bool     `json:"final,omitempty"`
	Copy      *copyJSON `json:"committed_kv_copy,omitempty"`
	Actions   []string  `json:"actions"`
}

type copyJSON struct {
	SourceWorker string `json:"source_worker,omitempty"`
	// SourceEndpoint is a keyed hash of the booking's endpoint, when it
	// gave one: the address is not kept, only that there was one.
	SourceEndpoint string   `json:"source_endpoint,omitempty"`
	SourceRank     int      `json:"source_rank,omitempty"`
	BlockHashes    []uint64 `json:"block_hashes"`
}

func (r *Recorder) encode(buf []byte, e *entry) []byte {
	b := &e.b
	row := rowJSON{Timestamp: e.at.Sub(r.start).Milliseconds(), RequestID: r.remapID('r', b.RequestID), Role: b.Role,
		Worker: b.Worker, Input: b.PromptTokens, BlockSize: b.BlockSize, Actions: actionTypes(e.message)}
	if b.Session.ID != "" {
		final := b.Session.Final
		row.Session, row.Turn, row.Final = r.remapID('s', b.Session.ID), b.Session.Turn, &final
	}
	if b.KVCopy != nil {
		c := &copyJSON{SourceWorker: b.KVCopy.SourceWorker, SourceRank: b.KVCopy.SourceRank, BlockHashes: make([]uint64, len(e.hashes))}
		if ep := b.KVCopy.SourceEndpoint; ep != "" {
			c.SourceEndpoint = "redacted:" + r.remapID('e', ep)
		}
		for i, h := range e.hashes {
			c.BlockHashes[i] = r.remapHash(h)
		}
		row.Copy = c
	}
	out, err := json.Marshal(row)
	if err != nil { // cannot happen for these types
		return buf
	}
	return append(append(buf, out...), '\n')
}

// actionTypes lists the action types of a hint message; an empty list for
// none.
func actionTypes(msg []byte) []string {
	out := []string{}
	if msg == nil {
		return out
	}
	var m struct {
		Actions []struct {
			Type string `json:"action_type"`
		} `json:"actions"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return out
	}
	for _, a := range m.Actions {
		out = append(out, a.Type)
	}
	return out
}
