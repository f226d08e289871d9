package analysis

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// PodStatus is one router pod's config status, as its sidecar reported
// it on the pod (rolloutapi.ConfigStatusAnnotation).
type PodStatus struct {
	// Pod is the pod's name.
	Pod string
	// Status is the decoded annotation; nil when the pod has none yet.
	Status *rolloutapi.ConfigStatus
}

// Refusal is a pod's refusal of the candidate (its sidecar's NACK).
type Refusal struct {
	Pod   string `json:"pod"`
	Error string `json:"error"`
}

// ShadowVerdict is the judgement of a shadow step.
type ShadowVerdict struct {
	// Phase is Failed when any pod refused the candidate, Successful once
	// every pod runs it in shadow, Inconclusive while some do not yet (or
	// there are no pods).
	Phase Phase `json:"phase"`
	// Reason is CandidateRefused, ShadowRunning or CandidatePending.
	Reason string `json:"reason"`
	// Message says why, naming pods, for a condition's message.
	Message string `json:"message"`
	// Pods counts the router pods; OnCandidate those running the
	// candidate in shadow.
	Pods        int `json:"pods"`
	OnCandidate int `json:"onCandidate"`
	// Refused are the pods that refused the candidate, by pod name.
	Refused []Refusal `json:"refused,omitempty"`
	// Waiting names the pods not yet running the candidate in shadow.
	Waiting []string `json:"waiting,omitempty"`
	// Counts sum the pods' shadow comparisons of the candidate: how many
	// bookings would have had other hints. They are reported, not
	// judged: a candidate is meant to change hints.
	Counts rolloutapi.ShadowCounts `json:"counts"`
}

// JudgeShadow judges a shadow step of candidate from the router pods'
// config status, and reports counts, the pods' shadow comparisons (from
// SumShadow or a Prometheus provider). A refusal of the candidate by any
// pod fails the step at once; a refusal of some other candidate (an
// earlier one) does not count.
func JudgeShadow(candidate string, pods []PodStatus, counts rolloutapi.ShadowCounts) ShadowVerdict {
	v := ShadowVerdict{Pods: len(pods), Counts: counts}
	for _, p := range pods {
		var cs *rolloutapi.CandidateStatus
		if p.Status != nil {
			cs = p.Status.Candidate
		}
		switch {
		case cs != nil && cs.Assigned == candidate && cs.Error != "":
			v.Refused = append(v.Refused, Refusal{Pod: p.Pod, Error: cs.Error})
		case cs != nil && cs.Assigned == candidate && cs.Active == candidate && cs.Stage == rolloutapi.StageShadow:
			v.OnCandidate++
		default:
			v.Waiting = append(v.Waiting, p.Pod)
		}
	}
	slices.SortFunc(v.Refused, func(a, b Refusal) int { return strings.Compare(a.Pod, b.Pod) })
	slices.Sort(v.Waiting)
	switch {
	case len(v.Refused) > 0:
		v.Phase, v.Reason = Failed, ReasonCandidateRefused
		parts := make([]string, 0, min(len(v.Refused), 3))
		for _, r := range v.Refused[:min(len(v.Refused), 3)] {
			parts = append(parts, fmt.Sprintf("pod %s: %s", r.Pod, r.Error))
		}
		more := ""
		if len(v.Refused) > 3 {
			more = fmt.Sprintf(" and %d more", len(v.Refused)-3)
		}
		v.Message = fmt.Sprintf("%d of %d pods refused candidate %s: %s%s", len(v.Refused), v.Pods, candidate, strings.Join(parts, "; "), more)
	case v.Pods == 0:
		v.Phase, v.Reason = Inconclusive, ReasonCandidatePending
		v.Message = "no router pods to run the candidate"
	case len(v.Waiting) > 0:
		v.Phase, v.Reason = Inconclusive, ReasonCandidatePending
		v.Message = fmt.Sprintf("%d of %d pods run candidate %s in shadow; waiting for %s", v.OnCandidate, v.Pods, candidate, listNames(v.Waiting))
	default:
		v.Phase, v.Reason = Successful, ReasonShadowRunning
		v.Message = fmt.Sprintf("%d of %d pods run candidate %s in shadow: %s", v.OnCandidate, v.Pods, candidate, describeShadow(&v.Counts))
	}
	return v
}

// SumShadow adds up the pods' shadow counts of candidate.
func SumShadow(candidate string, outcomes []rolloutapi.Outcomes) rolloutapi.ShadowCounts {
	var sum rolloutapi.ShadowCounts
	for i := range outcomes {
		c := outcomes[i].Shadow[candidate]
		if c == nil {
			continue
		}
		sum.Bookings += c.Bookings
		sum.Differ += c.Differ
		sum.CandidateErrors += c.CandidateErrors
		sum.ByAction = addCounts(sum.ByAction, c.ByAction)
		sum.ByRole = addCounts(sum.ByRole, c.ByRole)
	}
	return sum
}

func addCounts(into, from map[string]int64) map[string]int64 {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = make(map[string]int64, len(from))
	}
	for k, n := range from {
		into[k] += n
	}
	return into
}

// describeShadow says how many bookings would differ, and by what.
func describeShadow(c *rolloutapi.ShadowCounts) string {
	s := fmt.Sprintf("%d of %d bookings would differ", c.Differ, c.Bookings)
	if len(c.ByAction) > 0 {
		parts := make([]string, 0, len(c.ByAction))
		for _, k := range slices.Sorted(maps.Keys(c.ByAction)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, c.ByAction[k]))
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if c.CandidateErrors > 0 {
		s += fmt.Sprintf(", %d bookings the candidate failed", c.CandidateErrors)
	}
	return s
}
