package dispatch

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// workerMap is a registry of test workers.
type workerMap map[string]Worker

func (m workerMap) Lookup(id string) Worker {
	if w, ok := m[id]; ok {
		return w
	}
	return nil
}

// chanWorker is a hint-capable worker whose delivery is a bounded queue
// drained by its own goroutine, like the sidecar's: Deliver never waits and
// refuses a hint when the queue is full.
type chanWorker struct {
	ch   chan []byte
	mu   sync.Mutex
	got  int
	done chan struct{}
}

func newChanWorker(size int) *chanWorker {
	w := &chanWorker{ch: make(chan []byte, size), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		// Messages are counted and dropped, as the sidecar's sender drops
		// them once posted: keeping them would grow the heap the
		// benchmarks' garbage collections scan.
		for range w.ch {
			w.mu.Lock()
			w.got++
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *chanWorker) HintCapable() bool                 { return true }
func (w *chanWorker) InPool(string) bool                { return true }
func (w *chanWorker) SourceEndpoint(int) (string, bool) { return "", false }

func (w *chanWorker) Deliver(msg []byte, _ time.Time) bool {
	select {
	case w.ch <- msg:
		return true
	default:
		return false
	}
}

// close stops the worker once its queue has drained.
func (w *chanWorker) close() {
	close(w.ch)
	<-w.done
}

// recordedMetrics is a Metrics that keeps every series in a map, keyed by
// the series' name and label values ("failures/decode/p/p/malformed"), so
// that the tests read what the dispatcher reported without Prometheus. It
// records what the hook was told: the Forget calls delete the series.
type recordedMetrics struct {
	mu     sync.Mutex
	series map[string]*recordedSeries
	loads  []string // "ok hash prev" or "failed", in order
}

func newRecordedMetrics() *recordedMetrics {
	return &recordedMetrics{series: map[string]*recordedSeries{}}
}

// recordedSeries is a counter, gauge and observer in one: its value, and
// for an observer, the count of observations.
type recordedSeries struct {
	mu       sync.Mutex
	v        float64
	observed int
}

func (s *recordedSeries) Inc() { s.Add(1) }
func (s *recordedSeries) Dec() { s.Add(-1) }
func (s *recordedSeries) Add(v float64) {
	s.mu.Lock()
	s.v += v
	s.mu.Unlock()
}
func (s *recordedSeries) Set(v float64) {
	s.mu.Lock()
	s.v = v
	s.mu.Unlock()
}
func (s *recordedSeries) Observe(v float64) {
	s.mu.Lock()
	s.v += v
	s.observed++
	s.mu.Unlock()
}

func (m *recordedMetrics) at(key ...string) *recordedSeries {
	k := strings.Join(key, "/")
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.series[k]
	if !ok {
		s = &recordedSeries{}
		m.series[k] = s
	}
	return s
}

// value reads a series; 0 for one never reported.
func (m *recordedMetrics) value(key ...string) float64 {
	s := m.at(key...)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

// keys lists the series reported and not forgotten.
func (m *recordedMetrics) keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.series))
	for k := range m.series {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// forget deletes the series whose label values begin with labels.
func (m *recordedMetrics) forget(labels ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.series {
		if segs := strings.Split(k, "/")[1:]; len(segs) >= len(labels) && slices.Equal(segs[:len(labels)], labels) {
			delete(m.series, k)
		}
	}
}

func (m *recordedMetrics) Refusals(r Refusal) Counter { return m.at("refusals", r.String()) }
func (m *recordedMetrics) Role(role string) RoleMetrics {
	return recordedRole{m, role}
}
func (m *recordedMetrics) Policy(role, policy, typ string) PolicyMetrics {
	return recordedPolicy{m, role + "/" + policy + "/" + typ}
}
func (m *recordedMetrics) Isolation(role, policy, typ string) IsolationMetrics {
	return recordedPolicy{m, role + "/" + policy + "/" + typ}
}
func (m *recordedMetrics) ConfigLoaded(hash, prev string, _ time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads = append(m.loads, "ok "+hash+" "+prev)
}
func (m *recordedMetrics) ConfigFailed(time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads = append(m.loads, "failed")
}
func (m *recordedMetrics) ForgetRole(role string)                { m.forget(role) }
func (m *recordedMetrics) ForgetPolicy(role, policy, typ string) { m.forget(role, policy, typ) }

type recordedRole struct {
	m    *recordedMetrics
	role string
}

func (r recordedRole) Bookings(o Outcome) Counter { return r.m.at("bookings", r.role, o.String()) }
func (r recordedRole) BuildSeconds() Observer     { return r.m.at("build", r.role) }
func (r recordedRole) CopiesDropped(c CopyDrop) Counter {
	return r.m.at("copies_dropped", r.role, c.String())
}

// recordedPolicy is a policy's series and its isolation series; key is
// "role/policy/type".
type recordedPolicy struct {
	m   *recordedMetrics
	key string
}

func (p recordedPolicy) s(name string, more ...string) *recordedSeries {
	return p.m.at(append([]string{name, p.key}, more...)...)
}
func (p recordedPolicy) Actions() Counter                { return p.s("actions") }
func (p recordedPolicy) Failures(r DropReason) Counter   { return p.s("failures", r.String()) }
func (p recordedPolicy) Dropped(r DropReason) Counter    { return p.s("dropped", r.String()) }
func (p recordedPolicy) Overruns() Counter               { return p.s("overruns") }
func (p recordedPolicy) OverrunSeconds() Counter         { return p.s("overrun_seconds") }
func (p recordedPolicy) Ejections(r EjectReason) Counter { return p.s("ejections", r.String()) }
func (p recordedPolicy) Ejected() Gauge                  { return p.s("ejected") }
func (p recordedPolicy) Probation() Gauge                { return p.s("probation") }
func (p recordedPolicy) SkippedEjected() Counter         { return p.s("skipped", "ejected") }
func (p recordedPolicy) SkippedBusy() Counter            { return p.s("skipped", "busy") }
func (p recordedPolicy) AbandonedRuns() Gauge            { return p.s("abandoned_runs") }
func (p recordedPolicy) AbandonedRunSeconds() Observer   { return p.s("abandoned_seconds") }

// loadsReported counts the loads reported as what ("failed", "ok").
func (m *recordedMetrics) loadsReported(what string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range m.loads {
		if strings.HasPrefix(l, what) {
			n++
		}
	}
	return n
}

// lastLoad is the last load reported, "" before any.
func (m *recordedMetrics) lastLoad() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.loads) == 0 {
		return ""
	}
	return m.loads[len(m.loads)-1]
}
