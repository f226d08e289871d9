package rolegraph

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// dnsLabel is the pattern the CRD gives spec.router; the CLI reads
// manifests the API server never checked, so the compile step checks it
// again rather than write a ConfigMap name nobody can create.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// policyIndex is the HintPolicies of a namespace, by name, each checked on
// its own once.
type policyIndex map[string]*checkedPolicy

type checkedPolicy struct {
	hp       *v1alpha1.HintPolicy
	findings Findings
}

func (c *checkedPolicy) accepted() bool { return len(c.findings.Errors()) == 0 }

func newPolicyIndex(cat *hints.Catalog, hps []v1alpha1.HintPolicy) policyIndex {
	idx := make(policyIndex, len(hps))
	for i := range hps {
		hp := &hps[i]
		idx[hp.Name] = &checkedPolicy{hp: hp, findings: checkPolicy(cat, hp)}
	}
	return idx
}

// roleResult is one RouterRole, compiled.
type roleResult struct {
	rr       *v1alpha1.RouterRole
	findings Findings
	// compiled is the role as its current spec compiles, nil when the spec
	// breaks a rule or its references do not resolve.
	compiled *hintsconfig.Role
	// refs are the HintPolicy names the role references, in list order.
	refs []string
}

// refNames returns the HintPolicies the role references, sorted, each once.
func (res *roleResult) refNames() []string {
	return slices.Compact(slices.Sorted(slices.Values(res.refs)))
}

// compileRole checks one RouterRole: its references, then the catalog
// rules through the hints core. wl, when not nil, is the restart-mode
// workload of the role's router: the role is then checked under the mode
// its pod template starts the router with, which is what will run,
// rather than spec.routerMode, and t says what reads the file (a Dynamo
// Frontend's build, stock or declared). version is the Dynamo version the
// router's declared catalog states, empty when none does (see DialectOf).
func compileRole(cat *hints.Catalog, rr *v1alpha1.RouterRole, policies policyIndex, wl *Workload, t hintsconfig.Reader, version string) *roleResult {
	res := &roleResult{rr: rr}
	spec := &rr.Spec
	if !dnsLabel.MatchString(spec.Router) || len(spec.Router) > hints.MaxNameLength {
		res.findings = append(res.findings, errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonInvalidConfig, "spec.router",
			"router %q must be a DNS label of at most %d characters: lower-case letters, digits and '-'", spec.Router, hints.MaxNameLength))
	}
	if spec.WorkerSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(spec.WorkerSelector); err != nil {
			res.findings = append(res.findings, errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonInvalidWorkerSelector, "spec.workerSelector",
				"not a valid label selector: %v", err))
		}
	}

	entry := &hintsconfig.RoleEntry{
		Type:       spec.WorkerSelection.Type,
		Parameters: raw(spec.WorkerSelection.Parameters),
	}
	usable := true
	if spec.Hints != nil {
		list := make([]hintsconfig.HintSpec, 0, len(spec.Hints))
		for i, item := range spec.Hints {
			h, ok := res.resolve(i, item, policies)
			usable = usable && ok
			list = append(list, h)
		}
		entry.Hints = &list
	}
	if !usable {
		// An item that cannot be read would make the list rules (KV-copy
		// senders above all) report problems that are not there; the role
		// is checked once its items resolve.
		if len(res.findings.For(v1alpha1.ConditionAccepted).Errors()) == 0 {
			res.findings = append(res.findings, errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonUnresolvedRefs, "spec.hints",
				"the role is checked once every policyRef resolves; see ResolvedRefs"))
		}
		return res
	}

	checked := hintsconfig.CheckRole(cat, hintsconfig.RoleInput{Reader: t, Name: spec.Role, Entry: entry, Modes: roleModes(spec.Role, roleMode(spec), wl)})
	for _, p := range checked.Problems {
		res.findings = append(res.findings, roleFinding(p, spec))
	}
	if checked.Entry != nil {
		// Parameters a plugin reports go into the config as JSON; one that
		// reports something that is not JSON is refused here, alone.
		if _, err := json.Marshal(checked.Entry); err != nil {
			res.findings = append(res.findings, errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonInvalidParameters, "spec",
				"the policies report effective parameters that are not JSON: %v", err))
		}
	}
	if _, _, err := DialectOf(rr.Annotations, version, wl); err != nil {
		res.findings = append(res.findings, errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonInvalidConfig,
			"metadata.annotations["+v1alpha1.DynamoVersionAnnotation+"]", "%v", err))
	}
	res.findings = append(res.findings, presetFindings(rr, version, checked.Role, wl)...)
	if len(res.findings.Errors()) == 0 {
		res.compiled = checked.Role
	}
	return res
}

// roleModes is the router mode a role is checked under: mode, or for a
// restart-mode router (wl not nil) the one its pod template starts it
// with, so that messages name the flag and the container it came from.
func roleModes(role string, mode hintsconfig.RouterMode, wl *Workload) hintsconfig.Modes {
	if wl != nil {
		return wl.modes()
	}
	return hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{role: mode}}
}

// roleMode is the router mode a RouterRole's spec runs under: kv when
// unset, as the CRD defaults it.
func roleMode(spec *v1alpha1.RouterRoleSpec) hintsconfig.RouterMode {
	if spec.RouterMode == "" {
		return hintsconfig.ModeKV
	}
	return hintsconfig.RouterMode(spec.RouterMode)
}

// resolve turns one hint item into the hint spec it runs. It reports false
// when the item cannot be read at all.
func (res *roleResult) resolve(i int, item v1alpha1.HintItem, policies policyIndex) (hintsconfig.HintSpec, bool) {
	field := fmt.Sprintf("spec.hints[%d]", i)
	switch {
	case (item.Type == "") == (item.PolicyRef == nil):
		res.findings = append(res.findings, errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonInvalidConfig, field,
			"set exactly one of type (an inline hint policy) or policyRef (a HintPolicy in this namespace)"))
		return hintsconfig.HintSpec{}, false
	case item.Type != "":
		return hintsconfig.HintSpec{Type: item.Type, Name: item.Name, Parameters: raw(item.Parameters)}, true
	}

	name := item.PolicyRef.Name
	res.refs = append(res.refs, name)
	if item.Parameters != nil {
		res.findings = append(res.findings, errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonInvalidConfig, field,
			"a policyRef item takes no parameters: they belong to HintPolicy %q", name))
		return hintsconfig.HintSpec{}, false
	}
	p, ok := policies[name]
	if !ok {
		res.findings = append(res.findings, errorf(v1alpha1.ConditionResolvedRefs, v1alpha1.ReasonHintPolicyNotFound, field,
			"HintPolicy %q does not exist in %s; create it or fix policyRef.name", name, namespaceOf(res.rr)))
		return hintsconfig.HintSpec{}, false
	}
	if !p.accepted() {
		// The role is still compiled with the policy's spec, so Accepted
		// carries the catalog reason (UnknownHintType, InvalidParameters).
		first := p.findings.Errors()[0]
		f := errorf(v1alpha1.ConditionResolvedRefs, v1alpha1.ReasonHintPolicyInvalid, field,
			"HintPolicy %q is not accepted (%s: %s)", name, first.Reason, first.Message)
		f.Detail = fmt.Sprintf("HintPolicy %s, %s", name, p.hp.Spec.Type)
		res.findings = append(res.findings, f)
	}
	return hintsconfig.HintSpec{Type: p.hp.Spec.Type, Name: item.Name, Parameters: raw(p.hp.Spec.Parameters)}, true
}

// checkPolicy checks a HintPolicy on its own with the hints core.
func checkPolicy(cat *hints.Catalog, hp *v1alpha1.HintPolicy) Findings {
	_, probs := hintsconfig.CheckHint(cat, hintsconfig.HintSpec{Type: hp.Spec.Type, Parameters: raw(hp.Spec.Parameters)})
	var fs Findings
	for _, p := range probs {
		field := "spec.type"
		if p.Reason == hintsconfig.ReasonInvalidParameters {
			field = "spec.parameters"
		}
		fs = append(fs, Finding{
			Severity: p.Severity, Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ConditionReason(p.Reason),
			Field: field, Detail: p.Type, Key: p.Key, Message: p.Message,
		})
	}
	return fs
}

func raw(j *apiextensionsv1.JSON) hints.Params {
	if j == nil {
		return nil
	}
	return j.Raw
}

func jsonOrNil(p hints.Params) *apiextensionsv1.JSON {
	if len(p) == 0 {
		return nil
	}
	return &apiextensionsv1.JSON{Raw: append([]byte(nil), p...)}
}

func namespaceOf(rr *v1alpha1.RouterRole) string {
	if rr.Namespace == "" {
		return "the namespace"
	}
	return fmt.Sprintf("namespace %q", rr.Namespace)
}
