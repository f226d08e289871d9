package dispatch

import (
	"sync/atomic"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// snapshot is one loaded config, compiled and ready for bookings: never
// modified once published, so a booking that loaded it finishes on it however
// many reloads happen meanwhile.
type snapshot struct {
	hash   string
	doc    []byte
	graph  *hintsconfig.Graph
	roles  map[string]*roleRun
	loaded time.Time
}

// roleRun is a role as the booking path needs it: its policies in order and
// its metric series, resolved at load time.
type roleRun struct {
	name    string
	hints   []hintRun
	metrics roleMetrics
	// readsCopy is set when a policy of the role declares KVCopy: only
	// then is a copy's source resolved, and its drop counted.
	readsCopy bool
}

// hintRun is one policy instance of a role.
type hintRun struct {
	hint    *hintsconfig.Hint
	id      string
	metrics hintMetrics
	// outlier is the ejection state of a policy that may block; nil for
	// one that never blocks, which runs inline.
	outlier *outlier
	// lastLog rate-limits failure logs (unix nanoseconds): a policy that
	// fails on every booking must not flood the log.
	lastLog *atomic.Int64
}

// newSnapshot compiles a graph for bookings. keep collects the outlier
// keys of its policies that may block, which iso keeps from the config
// before.
func newSnapshot(g *hintsconfig.Graph, doc []byte, hash string, m Metrics, iso *isolator, keep map[string]bool, now time.Time) *snapshot {
	s := &snapshot{hash: hash, doc: doc, graph: g, roles: make(map[string]*roleRun, len(g.Roles)), loaded: now}
	for _, r := range g.Roles {
		rr := &roleRun{name: r.Name, hints: make([]hintRun, len(r.Hints)), metrics: roleMetricsOf(m, r.Name)}
		for i, h := range r.Hints {
			rr.hints[i] = hintRun{hint: h, id: h.ID(), metrics: hintMetricsOf(m, r.Name, h.ID(), h.Type), lastLog: new(atomic.Int64),
				outlier: iso.forHint(r.Name, h, keep)}
			rr.readsCopy = rr.readsCopy || h.Commitments.Has(hints.KVCopy)
		}
		s.roles[r.Name] = rr
	}
	return s
}

// roleNames lists the snapshot's roles, sorted, for error messages.
func (s *snapshot) roleNames() []string {
	names := make([]string, len(s.graph.Roles))
	for i, r := range s.graph.Roles {
		names[i] = r.Name
	}
	return names
}
