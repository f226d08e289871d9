package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/routerinput"
)

// Field indexes on RouterRoles, served by the manager's cache.
const (
	// indexRouter finds the RouterRoles of a router.
	indexRouter = routerinput.RouterIndex
	// indexPolicyRef finds the RouterRoles that reference a HintPolicy.
	indexPolicyRef = "spec.hints.policyRef.name"
)

func setupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1alpha1.RouterRole{}, indexRouter, func(o client.Object) []string {
		return []string{o.(*v1alpha1.RouterRole).Spec.Router}
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1alpha1.RouterRole{}, indexPolicyRef, func(o client.Object) []string {
		return routerinput.PolicyRefs(o.(*v1alpha1.RouterRole))
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1alpha1.RouterRollout{}, indexRolloutRouter, func(o client.Object) []string {
		return []string{o.(*v1alpha1.RouterRollout).Spec.Router}
	})
}
