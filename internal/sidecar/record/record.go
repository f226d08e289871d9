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
// It never blocks a booking: Record hands the booking to a queue bounded
// in count and in bytes and, when the queue is full, drops it and counts
// the drop. Rows reach the file at least every flush interval; a write
// error cuts the file back to its last whole row and the recorder retries,
// saying in its log and a metric that it is failing. It imports
// pkg/dispatch and prometheus, nothing else of the sidecar.
package record

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// Defaults and bounds of Options.
const (
	DefaultQueue    = 1024
	DefaultMaxBytes = 64 << 20
	DefaultMaxFiles = 3
	// MaxMaxFiles bounds MaxFiles: every rotation renames each kept file.
	MaxMaxFiles = 100
	// DefaultMaxQueueBytes bounds the memory of the bookings waiting for
	// the writer: 16 MiB holds about 55 bookings whose copy has 40,000
	// block hashes (their hashes and the kv.fetch message they answered).
	// It is part of the sidecar's memory budget beside the bookings in
	// flight and the queued hints.
	DefaultMaxQueueBytes = 16 << 20
	// DefaultFlushInterval is the longest a written row waits in memory:
	// a killed sidecar loses at most this much of its recording.
	DefaultFlushInterval = time.Second
	// MaxRowBytes is the longest row written, the longest line kvhint
	// preview reads (preview.MaxTraceLineBytes): a longer row is dropped
	// and counted, never written for preview to refuse.
	MaxRowBytes = 4 << 20
	// flushBytes is the buffer written at once between timed flushes.
	flushBytes = 64 << 10
	// entryOverhead is what a queued booking costs besides its hashes
	// and message: the entry, the booking's strings, the channel slot.
	entryOverhead = 512
)

// Options configure a Recorder.
type Options struct {
	// Path is the trace file; rotated files are Path.1, Path.2, ... A
	// file left at Path by an earlier run is rotated aside at start.
	Path string
	// SampleRate is the share of requests recorded, in (0, 1]. The choice
	// is by session ID (by request ID outside a session), so every turn
	// of a sampled session and every role of a request is recorded, or
	// none.
	SampleRate float64
	// MaxBytes is the size at which the file is rotated; 0 means
	// DefaultMaxBytes.
	MaxBytes int64
	// MaxFiles is how many rotated files are kept besides Path, at most
	// MaxMaxFiles; 0 means DefaultMaxFiles.
	MaxFiles int
	// Queue is how many bookings may wait for the writer; 0 means
	// DefaultQueue. A booking that finds it full is dropped and counted.
	Queue int
	// MaxQueueBytes bounds the memory of the bookings waiting for the
	// writer; 0 means DefaultMaxQueueBytes. A booking that would pass it
	// is dropped and counted.
	MaxQueueBytes int64
	// FlushInterval is the longest a row waits before it is written; 0
	// means DefaultFlushInterval.
	FlushInterval time.Duration
	// Key is the remapping key; nil draws one at random, so that two
	// recordings share nothing.
	Key []byte
	// Registerer receives the recorder's metrics; nil registers none.
	Registerer prometheus.Registerer
	Log        logr.Logger

	stopped bool       // tests: no writer until start
	fs      fileSystem // tests: faults; nil is the OS
}

// Check reports the first option out of range.
func (o *Options) Check() error {
	switch {
	case o.Path == "":
		return errors.New("record: no trace file path")
	case !(o.SampleRate > 0 && o.SampleRate <= 1):
		return fmt.Errorf("record: sample rate is %g; it must be above 0 and at most 1", o.SampleRate)
	case o.MaxBytes < 0:
		return fmt.Errorf("record: max bytes is %d; it must be above 0", o.MaxBytes)
	case o.MaxFiles < 0 || o.MaxFiles > MaxMaxFiles:
		return fmt.Errorf("record: max files is %d; it must be from 1 to %d", o.MaxFiles, MaxMaxFiles)
	case o.Queue < 0:
		return fmt.Errorf("record: queue is %d; it must be above 0", o.Queue)
	case o.MaxQueueBytes < 0:
		return fmt.Errorf("record: max queued bytes is %d; it must be above 0", o.MaxQueueBytes)
	case o.FlushInterval < 0:
		return fmt.Errorf("record: flush interval is %v; it must be above 0", o.FlushInterval)
	}
	return nil
}

// file is what the recorder needs of its trace file; *os.File has it.
type file interface {
	io.Writer
	io.ReaderAt
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// fileSystem opens and renames trace files; tests inject faults.
type fileSystem interface {
	OpenFile(name string, flag int, perm os.FileMode) (file, error)
	Rename(from, to string) error
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}
func (osFS) Rename(from, to string) error { return os.Rename(from, to) }

// Recorder writes sampled bookings to a trace file.
type Recorder struct {
	o       Options
	fs      fileSystem
	key     []byte
	start   time.Time
	rows    prometheus.Counter
	dropped *prometheus.CounterVec
	failed  prometheus.Counter
	failing prometheus.Gauge
	drops   atomic.Int64

	// The queue: bookings waiting for the writer, and their bytes.
	mu       sync.Mutex
	queue    []entry
	closed   bool
	qBytes   atomic.Int64
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	closeErr error

	// The writer's state, owned by its goroutine.
	file    file
	buf     []byte
	bufRows int
	// good is the file's length up to its last whole line; a failed
	// write leaves the file cut back to it.
	good int64
	// dirty says a failed write may have left a partial line past good.
	dirty bool
	// failingSince is when writes started to fail; zero while they work.
	failingSince time.Time
	lastAt       int64
	// failingNow mirrors failingSince for readers off the writer.
	failingNow atomic.Bool
}

type entry struct {
	at      time.Time
	b       dispatch.Booking
	hashes  []uint64
	message []byte
	size    int64
}

// New opens the trace file, rotating aside what an earlier run left
// there, and starts the writer.
func New(o Options) (*Recorder, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxFiles == 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.Queue == 0 {
		o.Queue = DefaultQueue
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	fsys := o.fs
	if fsys == nil {
		fsys = osFS{}
	}
	key := o.Key
	if key == nil {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("record: drawing the remapping key: %w", err)
		}
	}
	r := &Recorder{o: o, fs: fsys, key: key, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), start: time.Now(),
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvhint_sidecar_record_rows_total", Help: "Bookings written to the recorded trace."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_sidecar_record_dropped_total",
			Help: "Sampled bookings the recorder dropped, by reason (queue_full: the queue held its count or its bytes; row_too_long: over the longest line preview reads)."}, []string{"reason"}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "kvhint_sidecar_record_write_errors_total", Help: "Bookings the recorder could not write (file errors)."}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvhint_sidecar_record_failing", Help: "1 while writes to the recorded trace fail (the recorder retries every flush interval), else 0."}),
	}
	if o.Registerer != nil {
		queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvhint_sidecar_record_queued_bytes",
			Help: "Memory of the bookings waiting for the recorder's writer; bounded by --record-max-queued-bytes."}, func() float64 { return float64(r.qBytes.Load()) })
		for _, c := range []prometheus.Collector{r.rows, r.dropped, r.failed, r.failing, queued} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("record: registering metrics: %w", err)
			}
		}
	}
	if err := r.rotateAside(); err != nil {
		return nil, err
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
// message is kept as is (a dispatch.Hint's message never changes) and
// counted in the queue's bytes, since the queue keeps it alive.
func (r *Recorder) Record(b *dispatch.Booking, h dispatch.Hint) {
	if !r.sampled(b) {
		return
	}
	size := int64(entryOverhead + len(h.Message) + len(b.RequestID) + len(b.Role) + len(b.Worker) + len(b.Session.ID))
	if b.KVCopy != nil {
		size += int64(8*len(b.KVCopy.BlockHashes) + len(b.KVCopy.SourceWorker) + len(b.KVCopy.SourceEndpoint))
	}
	// Charge before copying: a booking the queue has no room for costs
	// nothing.
	if r.qBytes.Add(size) > r.o.MaxQueueBytes {
		r.qBytes.Add(-size)
		r.drop("queue_full")
		return
	}
	e := entry{at: time.Now(), b: *b, message: h.Message, size: size}
	if b.KVCopy != nil {
		c := *b.KVCopy
		e.hashes = append([]uint64(nil), c.BlockHashes...)
		c.BlockHashes = nil
		e.b.KVCopy = &c
	}
	r.mu.Lock()
	if r.closed || len(r.queue) >= r.o.Queue {
		closed := r.closed
		r.mu.Unlock()
		r.qBytes.Add(-size)
		if !closed {
			r.drop("queue_full")
		}
		return
	}
	r.queue = append(r.queue, e)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Recorder) drop(reason string) {
	r.dropped.WithLabelValues(reason).Inc()
	r.drops.Add(1)
}

// isFailing says whether writes to the file are failing.
func (r *Recorder) isFailing() bool { return r.failingNow.Load() }

// Dropped is the number of sampled bookings dropped so far.
func (r *Recorder) Dropped() int64 { return r.drops.Load() }

// sampled decides by the keyed hash of the session ID, so that a sampled
// session is recorded whole, or of the request ID outside a session, so
// that all roles of one request agree.
func (r *Recorder) sampled(b *dispatch.Booking) bool {
	if r.o.SampleRate >= 1 {
		return true
	}
	var v uint64
	if b.Session.ID != "" {
		v = r.mac(append([]byte{'s'}, b.Session.ID...))
	} else {
		v = r.mac([]byte(b.RequestID))
	}
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
// It never waits past ctx: a writer stalled on its file is left behind
// (its rows are lost) and Close says so.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.stop)
	r.mu.Unlock()
	select {
	case <-r.done:
		return r.closeErr
	case <-ctx.Done():
		r.mu.Lock()
		n := len(r.queue)
		r.mu.Unlock()
		r.o.Log.Info("The recorded trace's writer is stalled; left behind at the shutdown deadline", "path", r.o.Path, "queued", n)
		return fmt.Errorf("record: the trace writer did not finish before the shutdown deadline (%d bookings still queued): %w", n, ctx.Err())
	}
}

// run is the writer: it writes what is queued, flushes at least every
// FlushInterval, and on stop writes the rest and closes the file.
// Record must not be called after Close; the sidecar closes the recorder
// once its booking listener has stopped.
func (r *Recorder) run() {
	defer close(r.done)
	tick := time.NewTicker(r.o.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.wake:
			r.drain()
		case <-tick.C:
			r.flush()
		case <-r.stop:
			r.drain()
			r.flush()
			var err error
			if r.file != nil {
				err = r.file.Close()
			}
			if !r.failingSince.IsZero() {
				err = errors.Join(err, fmt.Errorf("record: writes to %s were failing at close", r.o.Path))
			}
			r.closeErr = err
			return
		}
	}
}

// drain encodes the queued bookings into the buffer, rotating and
// flushing as it fills.
func (r *Recorder) drain() {
	r.mu.Lock()
	batch := r.queue
	r.queue = nil
	r.mu.Unlock()
	line := make([]byte, 0, 4096)
	for i := range batch {
		e := &batch[i]
		line = r.encode(line[:0], e)
		r.qBytes.Add(-e.size)
		*e = entry{}
		if len(line) > MaxRowBytes {
			r.drop("row_too_long")
			continue
		}
		if size := r.good + int64(len(r.buf)); size > 0 && size+int64(len(line)) > r.o.MaxBytes {
			r.flush()
			r.rotate()
		}
		r.buf = append(r.buf, line...)
		r.bufRows++
		if len(r.buf) >= flushBytes {
			r.flush()
		}
	}
}

// flush writes the buffer. A failed write cuts the file back to its last
// whole line, drops the buffer's rows (counted) and marks the recorder
// failing; the next flush tries again, so the recording resumes once the
// file takes writes (space freed, a disk back).
func (r *Recorder) flush() {
	if len(r.buf) == 0 {
		return
	}
	err := r.repair()
	if err == nil {
		var n int
		n, err = r.file.Write(r.buf)
		if err == nil {
			r.good += int64(n)
		} else {
			r.dirty = true
			if r.repair() == nil {
				r.dirty = false
			}
		}
	}
	rows := r.bufRows
	r.buf, r.bufRows = r.buf[:0], 0
	if cap(r.buf) > 4*flushBytes {
		r.buf = nil // a long row's buffer is not kept
	}
	if err != nil {
		r.failed.Add(float64(rows))
		if r.failingSince.IsZero() {
			r.failingSince = time.Now()
			r.failing.Set(1)
			r.failingNow.Store(true)
			r.o.Log.Error(err, "Cannot write the recorded trace; the file is cut back to its last whole row, rows are dropped and counted as write errors, and writes are retried every flush interval",
				"path", r.o.Path, "flushInterval", r.o.FlushInterval)
		}
		return
	}
	r.rows.Add(float64(rows))
	if !r.failingSince.IsZero() {
		r.o.Log.Info("Writing the recorded trace again", "path", r.o.Path, "failedFor", time.Since(r.failingSince).Round(time.Millisecond))
		r.failingSince = time.Time{}
		r.failing.Set(0)
		r.failingNow.Store(false)
	}
}

// repair opens the file when a rotation could not, and cuts it back to
// its last whole line when a write may have left part of one.
func (r *Recorder) repair() error {
	if r.file == nil {
		if err := r.open(); err != nil {
			return err
		}
	}
	if r.dirty {
		if err := r.file.Truncate(r.good); err != nil {
			return fmt.Errorf("cutting the trace back to its last whole row: %w", err)
		}
		r.dirty = false
	}
	return nil
}

// open opens Path for appending, cut back to its last whole line.
func (r *Recorder) open() error {
	f, err := r.fs.OpenFile(r.o.Path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	good, err := wholeLines(f)
	if err == nil {
		err = f.Truncate(good)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("record: %s: %w", r.o.Path, err)
	}
	r.file, r.good, r.dirty = f, good, false
	return nil
}

// wholeLines is the length of f up to the end of its last whole line.
func wholeLines(f file) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	var b [4096]byte
	for end > 0 {
		n := int64(len(b))
		if end < n {
			n = end
		}
		if _, err := f.ReadAt(b[:n], end-n); err != nil && err != io.EOF {
			return 0, err
		}
		for i := n - 1; i >= 0; i-- {
			if b[i] == '\n' {
				return end - n + i + 1, nil
			}
		}
		end -= n
	}
	return 0, nil
}

// rotateAside moves a recording an earlier run left at Path to Path.1
// (cut back to its last whole line, which a kill may have left partial),
// so that a restart never truncates it.
func (r *Recorder) rotateAside() error {
	f, err := r.fs.OpenFile(r.o.Path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	good, err := wholeLines(f)
	if err == nil {
		err = f.Truncate(good)
	}
	f.Close()
	if err != nil {
		return fmt.Errorf("record: repairing the last run's %s: %w", r.o.Path, err)
	}
	if good == 0 {
		return nil
	}
	r.shift()
	if err := r.fs.Rename(r.o.Path, r.o.Path+".1"); err != nil {
		return fmt.Errorf("record: keeping the last run's recording: %w", err)
	}
	r.o.Log.Info("Kept the last run's recording", "path", r.o.Path+".1")
	return nil
}

// shift renames Path.1 to Path.2 and so on, dropping Path.MaxFiles.
func (r *Recorder) shift() {
	for i := r.o.MaxFiles - 1; i >= 1; i-- {
		_ = r.fs.Rename(r.o.Path+"."+strconv.Itoa(i), r.o.Path+"."+strconv.Itoa(i+1))
	}
}

// rotate closes the file and moves it to Path.1, Path.1 to Path.2, and
// so on up to MaxFiles, then opens a new one. When it cannot, the rows
// go on to the file that is open, or wait for the next flush to open one.
func (r *Recorder) rotate() {
	if r.file == nil {
		return
	}
	if err := r.file.Close(); err != nil {
		r.o.Log.Error(err, "Closing the recorded trace to rotate it", "path", r.o.Path)
	}
	r.file = nil
	r.shift()
	if err := r.fs.Rename(r.o.Path, r.o.Path+".1"); err != nil {
		r.o.Log.Error(err, "Rotating the recorded trace", "path", r.o.Path)
	}
	if err := r.open(); err != nil {
		r.o.Log.Error(err, "Opening the recorded trace after a rotation; retried at the next flush", "path", r.o.Path)
	}
}

// rowJSON is a recorded booking as a trace line: a Mooncake trace row
// (timestamp, input_length, session_id) with the booking's fields beside
// it, which kvhint preview reads (internal/preview's rowJSON). It is not
// the booking API's body (pkg/bookingapi.Booking): the session is flat,
// the prompt is input_length, the actions built are kept, and the copy's
// endpoint is a keyed hash, not the address.
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

// copyJSON is a recorded committed copy: hints.CommittedCopy's JSON form
// but for SourceEndpoint, which holds a keyed hash.
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
	// Bookings are queued in the order they take the queue's lock, not
	// of their clocks: a row never goes back in time, which preview
	// refuses.
	at := max(e.at.Sub(r.start).Milliseconds(), r.lastAt)
	r.lastAt = at
	row := rowJSON{Timestamp: at, RequestID: r.remapID('r', b.RequestID), Role: b.Role,
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
