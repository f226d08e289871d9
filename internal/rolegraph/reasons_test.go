package rolegraph

import (
	"testing"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/hints"
)

// TestCatalogReasonsMatchCore keeps the API's documented Accepted reasons
// equal to the reasons the hints core reports: findings copy the core's
// value into the condition, so a renamed core reason would silently change
// the API.
func TestCatalogReasonsMatchCore(t *testing.T) {
	for _, tc := range []struct {
		core hints.Reason
		api  v1alpha1.ConditionReason
	}{
		{hints.ReasonInvalidConfig, v1alpha1.ReasonInvalidConfig},
		{hints.ReasonInvalidRole, v1alpha1.ReasonInvalidRole},
		{hints.ReasonInvalidRouterMode, v1alpha1.ReasonInvalidRouterMode},
		{hints.ReasonUnknownWorkerSelection, v1alpha1.ReasonUnknownWorkerSelection},
		{hints.ReasonInvalidParameters, v1alpha1.ReasonInvalidParameters},
		{hints.ReasonUnknownHintType, v1alpha1.ReasonUnknownHintType},
		{hints.ReasonInvalidHintName, v1alpha1.ReasonInvalidHintName},
		{hints.ReasonDuplicateHintName, v1alpha1.ReasonDuplicateHintName},
		{hints.ReasonTooManyHints, v1alpha1.ReasonTooManyHints},
		{hints.ReasonHintsRequireKVMode, v1alpha1.ReasonHintsRequireKVMode},
		{hints.ReasonKVCopySenderMissing, v1alpha1.ReasonKVCopySenderMissing},
		{hints.ReasonKVCopySenderDuplicate, v1alpha1.ReasonKVCopySenderDuplicate},
	} {
		if string(tc.core) != string(tc.api) {
			t.Errorf("core reason %q is %q in the API", tc.core, tc.api)
		}
	}
}
