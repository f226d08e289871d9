package controllers

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
)

// refusedRetry is how often a refused write (workload.Refused) is tried again when nothing
// of the router changes (an admission policy may be removed, which no
// watch of the manager's sees).
const refusedRetry = 15 * time.Second

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
func (r *RouterReconciler) noteRollout(ctx context.Context, router types.NamespacedName, err error) (changed bool, refusal *workload.Refused) {
	var wr *workload.Refused
	if !errors.As(err, &wr) {
		if err == nil {
			_, had := r.refused.LoadAndDelete(router)
			return had, nil
		}
		return false, nil
	}
	now := rolegraph.WriteRefusal{Hash: wr.Hash, Kind: wr.Workload.Kind, Name: wr.Workload.Name, Message: wr.Message}
	old, had := r.refused.Swap(router, now)
	ctrl.LoggerFrom(ctx).Info("Config not written: the write was refused", "workload", wr.Workload.Kind+"/"+wr.Workload.Name, "hash", wr.Hash, "why", wr.Message)
	return !had || old.(rolegraph.WriteRefusal) != now, wr
}
