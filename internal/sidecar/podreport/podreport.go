// Package podreport writes the hash of the config the sidecar runs on its
// own Pod (hints.kvrouter.io/applied-hash), from which the operator counts
// the router pods that run a config (Programmed).
//
// It imports client-go and pkg/wellknown; nothing of the sidecar.
package podreport

import (
	"context"
	"encoding/json"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

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

// Reporter writes the hash of the config in force on the sidecar's own
// Pod, as the annotation hints.kvrouter.io/applied-hash: the operator counts
// the router pods that run its latest config from it. Patches run in their
// own goroutine, retried with backoff; a newer hash replaces a pending one,
// so the latest always wins and a slow API server never holds a reload.
type Reporter struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string

	latest chan string
}

// New returns a reporter for the pod namespace/name (from the
// downward API: POD_NAMESPACE, POD_NAME).
func New(c kubernetes.Interface, namespace, name string) *Reporter {
	return &Reporter{Client: c, Namespace: namespace, Name: name, latest: make(chan string, 1)}
}

// Report queues hash for writing without waiting, replacing any hash not
// yet written.
func (p *Reporter) Report(hash string) {
	for {
		select {
		case p.latest <- hash:
			return
		default:
		}
		select {
		case <-p.latest: // drop the stale one and try again
		default:
		}
	}
}

// Run writes reported hashes until ctx is done.
func (p *Reporter) Run(ctx context.Context, log logr.Logger) {
	log = log.WithValues("pod", p.Namespace+"/"+p.Name)
	for {
		var hash string
		select {
		case <-ctx.Done():
			return
		case hash = <-p.latest:
		}
		backoff := reportBackoffMin
		for {
			err := p.patch(ctx, hash)
			if err == nil {
				log.V(1).Info("Reported applied hints config", "hash", hash)
				break
			}
			log.Error(err, "Cannot write the applied hash on the pod; retrying", "hash", hash, "retryIn", backoff.String())
			select {
			case <-ctx.Done():
				return
			case hash = <-p.latest: // a newer hash supersedes this one at once
				backoff = reportBackoffMin
			case <-time.After(backoff):
				backoff = min(2*backoff, reportBackoffMax)
			}
		}
	}
}

// patch writes the annotation with a JSON merge patch: it touches nothing
// else on the pod and needs no read first.
func (p *Reporter) patch(ctx context.Context, hash string) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{wellknown.AppliedHashAnnotation: hash}},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = p.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: wellknown.SidecarFieldManager})
	return err
}
