package stage

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Shadow comparison results, the result label of shadow_bookings_total.
const (
	resultSame           = "same"
	resultDiffer         = "differ"
	resultCandidateError = "candidate_error"
)

// otherLabel stands for the roles and action types past the bound a
// metric keeps apart.
const otherLabel = "other"

// maxLabelValues bounds the roles, and the action types of each role, the
// metrics keep apart: roles come from the stable config (a booking of a
// role it lacks is refused before the shadow runs) and action types from
// the policies of both configs, so the bound is only a guard.
const maxLabelValues = 64

// metrics are the shadow comparison counters:
// kvhint_shadow_bookings_total{role,result} and
// kvhint_shadow_action_diff_total{role,action}. The counters of each role
// and action are resolved once and kept, so a booking looks them up in a
// sync.Map instead of hashing label values.
type metrics struct {
	bookings    *prometheus.CounterVec
	actionDiffs *prometheus.CounterVec

	roles   sync.Map // role -> *roleMetrics
	mu      sync.Mutex
	nRoles  int
	actions sync.Map // role + "\x00" + action -> prometheus.Counter
	nAction map[string]int
}

type roleMetrics struct {
	same, differ, candidateError prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		bookings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvhint", Subsystem: "shadow", Name: "bookings_total",
			Help: "Bookings the staged candidate built in shadow beside the stable config, by role and result (same: the same hint; differ: another hint; candidate_error: the candidate failed the booking).",
		}, []string{"role", "result"}),
		actionDiffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvhint", Subsystem: "shadow", Name: "action_diff_total",
			Help: "Shadow bookings whose hints differ in an action type (the candidate's actions of that type are not the stable config's), by role and action type.",
		}, []string{"role", "action"}),
		nAction: map[string]int{},
	}
	if reg != nil {
		reg.MustRegister(m.bookings, m.actionDiffs)
	}
	return m
}

// role returns the counters of role.
func (m *metrics) role(role string) *roleMetrics {
	if v, ok := m.roles.Load(role); ok {
		return v.(*roleMetrics)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.roles.Load(role); ok {
		return v.(*roleMetrics)
	}
	label := role
	if m.nRoles >= maxLabelValues {
		label = otherLabel
	}
	rm := &roleMetrics{
		same:           m.bookings.WithLabelValues(label, resultSame),
		differ:         m.bookings.WithLabelValues(label, resultDiffer),
		candidateError: m.bookings.WithLabelValues(label, resultCandidateError),
	}
	if label == role {
		m.nRoles++
		m.roles.Store(role, rm)
	}
	return rm
}

// actionDiff returns the counter of role's differing action type.
func (m *metrics) actionDiff(role, action string) prometheus.Counter {
	key := role + "\x00" + action
	if v, ok := m.actions.Load(key); ok {
		return v.(prometheus.Counter)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.actions.Load(key); ok {
		return v.(prometheus.Counter)
	}
	if m.nAction[role] >= maxLabelValues || (len(m.nAction) >= maxLabelValues && m.nAction[role] == 0) {
		return m.actionDiffs.WithLabelValues(otherLabel, otherLabel)
	}
	c := m.actionDiffs.WithLabelValues(role, action)
	m.nAction[role]++
	m.actions.Store(key, c)
	return c
}
