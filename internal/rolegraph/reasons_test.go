package rolegraph

import (
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestCatalogReasonsMatchCore keeps the API's documented Accepted reasons
// equal to the reasons the hints core reports: findings copy the core's
// value into the condition, so a renamed core reason would silently change
// the API.
func TestCatalogReasonsMatchCore(t *testing.T) {
	for _, tc := range []struct {
		core hintsconfig.Reason
		api  v1alpha1.ConditionReason
	}{
		{hintsconfig.ReasonInvalidConfig, v1alpha1.ReasonInvalidConfig},
		{hintsconfig.ReasonInvalidRole, v1alpha1.ReasonInvalidRole},
		{hintsconfig.ReasonInvalidRouterMode, v1alpha1.ReasonInvalidRouterMode},
		{hintsconfig.ReasonUnknownWorkerSelection, v1alpha1.ReasonUnknownWorkerSelection},
		{hintsconfig.ReasonInvalidParameters, v1alpha1.ReasonInvalidParameters},
		{hintsconfig.ReasonUnknownHintType, v1alpha1.ReasonUnknownHintType},
		{hintsconfig.ReasonInvalidHintName, v1alpha1.ReasonInvalidHintName},
		{hintsconfig.ReasonDuplicateHintName, v1alpha1.ReasonDuplicateHintName},
		{hintsconfig.ReasonTooManyHints, v1alpha1.ReasonTooManyHints},
		{hintsconfig.ReasonHintsRequireKVMode, v1alpha1.ReasonHintsRequireKVMode},
		{hintsconfig.ReasonKVCopySenderMissing, v1alpha1.ReasonKVCopySenderMissing},
		{hintsconfig.ReasonKVCopySenderDuplicate, v1alpha1.ReasonKVCopySenderDuplicate},
		{hintsconfig.ReasonPolicyFormCannotCarry, v1alpha1.ReasonPolicyFormCannotCarry},
		{hintsconfig.ReasonPresetOverridesParameters, v1alpha1.ReasonPresetOverridesParameters},
	} {
		if string(tc.core) != string(tc.api) {
			t.Errorf("core reason %q is %q in the API", tc.core, tc.api)
		}
	}
}
