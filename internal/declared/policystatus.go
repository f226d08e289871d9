package declared

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// PolicyStatus checks a HintPolicy used by the RouterRoles usedBy, at
// now, against the linked catalog or the declarations in c (which may be
// nil: the linked catalog only). HintPolicies belong to a namespace, not to
// a router: one whose type the linked catalog holds is checked against it;
// one whose type only declared catalogs of the namespace hold is checked
// against each of them, and is accepted only if every one accepts it (the
// first refusal, by router name, is reported, naming the router). A type
// no catalog holds is UnknownHintType, as before. The RouterRoles that use
// the policy are checked by their own router's catalog in any case.
func (c *Store) PolicyStatus(ctx context.Context, linked *hints.Catalog, hp *v1alpha1.HintPolicy, usedBy []string, now metav1.Time) (v1alpha1.HintPolicyStatus, error) {
	if _, held := linked.Hint(hp.Spec.Type); held || c == nil {
		st, _ := rolegraph.HintPolicyStatus(linked, hp, usedBy, now)
		return st, nil
	}
	decls, err := c.ForType(ctx, hp.Namespace, hp.Spec.Type)
	if err != nil {
		return v1alpha1.HintPolicyStatus{}, err
	}
	if len(decls) == 0 {
		st, _ := rolegraph.HintPolicyStatus(linked, hp, usedBy, now)
		return st, nil
	}
	routers := slices.Sorted(maps.Keys(decls))
	var accepted v1alpha1.HintPolicyStatus
	for i, router := range routers {
		st, findings := rolegraph.HintPolicyStatus(decls[router], hp, usedBy, now)
		if len(findings.Errors()) > 0 {
			setAcceptedMessage(&st, fmt.Sprintf("checked against the declared catalog of router %s: ", router), "")
			return st, nil
		}
		if i == 0 {
			accepted = st
		}
	}
	setAcceptedMessage(&accepted, "", fmt.Sprintf(" (declared by the catalog of router %s, not linked into the manager)", strings.Join(routers, ", ")))
	return accepted, nil
}

// setAcceptedMessage puts prefix and suffix around the Accepted message.
func setAcceptedMessage(st *v1alpha1.HintPolicyStatus, prefix, suffix string) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == string(v1alpha1.ConditionAccepted) {
			st.Conditions[i].Message = prefix + st.Conditions[i].Message + suffix
		}
	}
}
