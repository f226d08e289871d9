// Package podreport writes what the sidecar runs on its own Pod: the hash
// of the config in force (hints.kvrouter.io/applied-hash), from which the
// operator counts the router pods that run a config (Programmed), and the
// hint policies the dispatcher has ejected from their roles' paths
// (hints.kvrouter.io/ejected-policies), from which it names them in the
// RouterRoles' status; and the config status of a staged rollout
// (rolloutapi.ConfigStatusAnnotation: the config assigned, in force, last
// good, and the candidate's), from which the manager counts the pods on a
// candidate and sees a refusal.
//
// It imports client-go, internal/rolloutapi and pkg/wellknown; nothing of
// the sidecar.
package podreport

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// Backoff bounds of a failed annotation patch. The ceiling is short: the
// report is what turns a role Programmed, and after an API server outage
// a 30 s ceiling left the applied hash unreported for 45 s after the API
// server was back (test/fault TestAPIServerOutage). One small patch per
// sidecar every 5 s is little load on an API server that is down.
const (
	reportBackoffMin = 200 * time.Millisecond
	reportBackoffMax = 5 * time.Second
)

// Ejected is one policy out of its role's path, as the pod reports it.
type Ejected struct {
	Role, Policy, Reason string
}

// Reporter writes the hash of the config in force and the ejected policies
// on the sidecar's own Pod. Patches run in their own goroutine, retried
// with backoff; a newer report replaces a pending one, so the latest
// always wins and a slow API server never holds a reload or a booking.
type Reporter struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string

	mu       sync.Mutex
	hash     string
	hashSet  bool
	ejected  string
	reported bool // the ejected-policies annotation may be on the pod
	// status is the config status's annotation value; "" until one is
	// reported.
	status string
	kick   chan struct{}
}

// New returns a reporter for the pod namespace/name (from the
// downward API: POD_NAMESPACE, POD_NAME).
func New(c kubernetes.Interface, namespace, name string) *Reporter {
	// reported starts true: an earlier run of the sidecar in this pod may
	// have left the annotation, and the first write clears it.
	return &Reporter{Client: c, Namespace: namespace, Name: name, kick: make(chan struct{}, 1), reported: true}
}

// Report queues hash for writing without waiting, replacing any hash not
// yet written.
func (p *Reporter) Report(hash string) {
	p.mu.Lock()
	p.hash, p.hashSet = hash, true
	p.mu.Unlock()
	p.wake()
}

// ReportEjected queues the list of ejected policies for writing without
// waiting; an empty list removes the annotation.
func (p *Reporter) ReportEjected(list []Ejected) {
	p.set(&p.ejected, FormatEjected(list))
}

// set sets *field, guarded by mu, to v, and wakes the writer if it
// changed.
func (p *Reporter) set(field *string, v string) {
	p.mu.Lock()
	changed := v != *field
	*field = v
	p.mu.Unlock()
	if changed {
		p.wake()
	}
}

// ReportConfigStatus queues the config status for writing without
// waiting, when it changed. Errors are cut so that the annotation fits
// rolloutapi.MaxConfigStatusBytes.
func (p *Reporter) ReportConfigStatus(cs rolloutapi.ConfigStatus) {
	p.set(&p.status, FormatConfigStatus(cs))
}

// maxStatusErrorBytes is the most of each error the config status keeps:
// two of them, the hashes and the keys fit rolloutapi.MaxConfigStatusBytes.
const maxStatusErrorBytes = 1600

// FormatConfigStatus is the value of rolloutapi.ConfigStatusAnnotation:
// cs as JSON, its errors cut to maxStatusErrorBytes.
func FormatConfigStatus(cs rolloutapi.ConfigStatus) string {
	cs.Error = cut(cs.Error, maxStatusErrorBytes)
	if cs.Candidate != nil {
		c := *cs.Candidate
		c.Error = cut(c.Error, maxStatusErrorBytes)
		cs.Candidate = &c
	}
	b, err := json.Marshal(cs)
	if err != nil {
		return "" // a struct of strings and ints always marshals
	}
	return string(b)
}

// cut returns s cut to at most n bytes on a rune boundary, marked with an
// ellipsis when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func (p *Reporter) wake() {
	select {
	case p.kick <- struct{}{}:
	default: // a write is pending; it will read the latest
	}
}

// FormatEjected is the value of wellknown.EjectedPoliciesAnnotation for a
// list: sorted by the caller, at most wellknown.MaxEjectedPoliciesReported
// entries and a count of the rest.
func FormatEjected(list []Ejected) string {
	var b strings.Builder
	for i, e := range list {
		if i == wellknown.MaxEjectedPoliciesReported {
			fmt.Fprintf(&b, ",+%d", len(list)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Role + "/" + e.Policy + "=" + e.Reason)
	}
	return b.String()
}

// Run writes reports until ctx is done.
func (p *Reporter) Run(ctx context.Context, log logr.Logger) {
	log = log.WithValues("pod", p.Namespace+"/"+p.Name)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		backoff := reportBackoffMin
		for {
			hash, hashSet, ejected, removeEjected, status := p.pending()
			err := p.patch(ctx, hash, hashSet, ejected, removeEjected, status)
			if err == nil {
				p.mu.Lock()
				p.reported = ejected != ""
				p.mu.Unlock()
				log.V(1).Info("Reported on the pod", "hash", hash, "ejectedPolicies", ejected, "configStatus", status)
				break
			}
			log.Error(err, "Cannot write the report on the pod; retrying", "hash", hash, "ejectedPolicies", ejected, "configStatus", status, "retryIn", backoff.String())
			select {
			case <-ctx.Done():
				return
			case <-p.kick: // a newer report supersedes this one at once
				backoff = reportBackoffMin
			case <-time.After(backoff):
				backoff = min(2*backoff, reportBackoffMax)
			}
		}
	}
}

// pending reads what to write. An empty ejected list is written as a
// removal of the annotation, once one may have been set.
func (p *Reporter) pending() (hash string, hashSet bool, ejected string, removeEjected bool, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	removeEjected = p.ejected == "" && p.reported
	return p.hash, p.hashSet, p.ejected, removeEjected, p.status
}

// patch writes the annotations with a JSON merge patch: it touches nothing
// else on the pod and needs no read first.
func (p *Reporter) patch(ctx context.Context, hash string, hashSet bool, ejected string, removeEjected bool, status string) error {
	annotations := map[string]any{}
	if hashSet {
		annotations[wellknown.AppliedHashAnnotation] = hash
	}
	if status != "" {
		annotations[rolloutapi.ConfigStatusAnnotation] = status
	}
	switch {
	case ejected != "":
		annotations[wellknown.EjectedPoliciesAnnotation] = ejected
	case removeEjected:
		annotations[wellknown.EjectedPoliciesAnnotation] = nil // a merge patch's removal
	}
	if len(annotations) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = p.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: wellknown.SidecarFieldManager})
	return err
}
