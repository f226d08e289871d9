// Package provider fetches what a rollout's analysis judges: the request
// outcomes of a router's stable and candidate configs over a step's
// window, as an analysis.Input, from one of two sources. Sidecars (the
// default) asks every router pod's sidecar for its samples on its ops
// port, so no extra server is needed; Prometheus runs PromQL over the
// kvhint_outcome_* series the sidecars export, where users scrape them.
//
// It holds no Kubernetes client: the manager lists the router's pods and
// passes them in. It may import the standard library, k8s.io/api's core
// types, internal/rolloutapi and internal/rollout/analysis.
package provider

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Provider fetches one measurement.
type Provider interface {
	Measure(ctx context.Context, q Query) (Measurement, error)
}

// Query is what one measurement asks for.
type Query struct {
	// Namespace and Router name the router.
	Namespace, Router string
	// Pods are the router's pods, as the manager listed them.
	Pods []corev1.Pod
	// Stable and Candidate are the config hashes of the baseline and the
	// canary.
	Stable, Candidate string
	// Since is the start of the window (the step's start). Until is its
	// end for a Prometheus query (zero: now); sidecars answer with what
	// they hold when asked.
	Since, Until time.Time
}

// check refuses a query whose arms are not two different config hashes.
func (q *Query) check() error {
	if !rolloutapi.ValidHash(q.Stable) || !rolloutapi.ValidHash(q.Candidate) {
		return fmt.Errorf("router %s/%s: stable %q and candidate %q must be config hashes", q.Namespace, q.Router, q.Stable, q.Candidate)
	}
	if q.Stable == q.Candidate {
		return fmt.Errorf("router %s/%s: stable and candidate are the same config %s: nothing to compare", q.Namespace, q.Router, q.Stable)
	}
	return nil
}

// Measurement is what a provider fetched.
type Measurement struct {
	// Input is the analysis input: the two arms and the sources that did
	// not answer.
	Input analysis.Input
	// Shadow sums the shadow comparisons of the candidate the sources
	// reported.
	Shadow rolloutapi.ShadowCounts
	// Sources says, per source (a pod, or the Prometheus server), where it
	// was asked and what went wrong, if anything.
	Sources []Source
}

// Source is one source a measurement asked.
type Source struct {
	// Name is the pod's name, or "prometheus".
	Name string `json:"name"`
	// Address is where it was asked; empty when no address was allowed.
	Address string `json:"address,omitempty"`
	// Error says why it gave nothing; empty when it answered. A source
	// with an Error is named in the input's Unanswered.
	Error string `json:"error,omitempty"`
	// Skipped says why a pod was not asked: it serves no requests (not
	// Running, or terminating), so it has nothing to hide.
	Skipped string `json:"skipped,omitempty"`
}
