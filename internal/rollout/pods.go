package rollout

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Pods counts a router's pods by the config their sidecars report running
// (rolloutapi.ConfigStatusAnnotation).
type Pods struct {
	// Live are the pods counted: not being deleted, not terminated;
	// sorted by name.
	Live []corev1.Pod
	// Reports are the pods' reports by pod name; a pod that reported
	// nothing readable has none.
	Reports map[string]*rolloutapi.ConfigStatus
	// Total, OnStable, OnCandidate and Refused are as in
	// v1alpha1.RolloutPods.
	Total, OnStable, OnCandidate, Refused int32
	// Refusal names the first pod (by name) that refused the candidate,
	// and its sidecar's error, when one did.
	Refusal string
}

// CountPods counts pods against the stable hash and the stage (nil while
// no candidate is staged). A report that does not parse, or is over
// rolloutapi.MaxConfigStatusBytes, counts as none.
func CountPods(pods []corev1.Pod, stable string, stage *rolloutapi.Stage) Pods {
	p := Pods{Reports: map[string]*rolloutapi.ConfigStatus{}}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		p.Live = append(p.Live, *pod)
	}
	slices.SortFunc(p.Live, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, pod := range p.Live {
		p.Total++
		cs := ConfigStatusOf(&pod)
		if cs == nil {
			continue
		}
		p.Reports[pod.Name] = cs
		if stable != "" && cs.Active == stable {
			p.OnStable++
		}
		if stage == nil || cs.Candidate == nil || cs.Candidate.Assigned != stage.Candidate {
			continue
		}
		switch c := cs.Candidate; {
		case c.Error != "" && c.Active != stage.Candidate:
			p.Refused++
			if p.Refusal == "" {
				p.Refusal = fmt.Sprintf("pod %s refused candidate %s: %s", pod.Name, stage.Candidate, c.Error)
			}
		case c.Active == stage.Candidate && c.Stage == stage.Stage && c.Weight == stage.Weight:
			p.OnCandidate++
		}
	}
	return p
}

// ConfigStatusOf returns the config status a pod's sidecar reports, or nil.
func ConfigStatusOf(pod *corev1.Pod) *rolloutapi.ConfigStatus {
	raw, ok := pod.Annotations[rolloutapi.ConfigStatusAnnotation]
	if !ok || len(raw) > rolloutapi.MaxConfigStatusBytes {
		return nil
	}
	var cs rolloutapi.ConfigStatus
	if err := json.Unmarshal([]byte(raw), &cs); err != nil {
		return nil
	}
	return &cs
}

// Status returns the counts as a RouterRollout shows them; the summary
// counts the pods on the candidate while one is staged.
func (p Pods) Status(staged bool) *v1alpha1.RolloutPods {
	on := p.OnStable
	if staged {
		on = p.OnCandidate
	}
	return &v1alpha1.RolloutPods{
		Total: p.Total, OnStable: p.OnStable, OnCandidate: p.OnCandidate, Refused: p.Refused,
		Summary: fmt.Sprintf("%d/%d", on, p.Total),
	}
}
