package controllers

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// writeRefused is a write of the router's config to a restart-mode
// workload that was refused: by the API server (admission, validation,
// a dry run's) or by the manager's check of a dry run's result. Trying
// again at once would be refused again; the roles report it
// (rolegraph.Input.WriteRefusals) and the write is tried again after
// refusedRetry, or when anything of the router changes.
type writeRefused struct {
	workload *rolegraph.Workload
	hash     string
	message  string
}

func (e *writeRefused) Error() string { return e.message }

// refusedRetry is how often a refused write is tried again when nothing
// of the router changes (an admission policy may be removed, which no
// watch of the manager's sees).
const refusedRetry = 15 * time.Second

// isRefusal reports whether the API server refused a request for what it
// is (forbidden by admission or RBAC, invalid, malformed), rather than
// for when it came (a conflict, a timeout).
func isRefusal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// revisionHash is the config hash of a revision ConfigMap.
func revisionHash(rev *corev1.ConfigMap) string {
	if h := rev.Labels[v1alpha1.ConfigHashLabel]; h != "" {
		return h
	}
	i := strings.LastIndexByte(rev.Name, '-')
	return rev.Name[i+1:]
}

// refusals returns the router's last refused write, for the compile step.
func (r *RouterReconciler) refusals(router types.NamespacedName) map[string]rolegraph.WriteRefusal {
	v, ok := r.refused.Load(router)
	if !ok {
		return nil
	}
	return map[string]rolegraph.WriteRefusal{router.Name: v.(rolegraph.WriteRefusal)}
}

// noteRollout records how the router's rollout went: a refusal is kept
// for the compile step and reported, anything else forgets the last one.
// It returns whether the roles' status must be compiled again: a refusal
// that is new, or one that is over.
func (r *RouterReconciler) noteRollout(ctx context.Context, router types.NamespacedName, err error) (changed bool, refusal *writeRefused) {
	var wr *writeRefused
	if !errors.As(err, &wr) {
		if err == nil {
			_, had := r.refused.LoadAndDelete(router)
			return had, nil
		}
		return false, nil
	}
	now := rolegraph.WriteRefusal{Hash: wr.hash, Kind: wr.workload.Kind, Name: wr.workload.Name, Message: wr.message}
	old, had := r.refused.Swap(router, now)
	ctrl.LoggerFrom(ctx).Info("Config not written: the write was refused", "workload", wr.workload.Kind+"/"+wr.workload.Name, "hash", wr.hash, "why", wr.message)
	return !had || old.(rolegraph.WriteRefusal) != now, wr
}
