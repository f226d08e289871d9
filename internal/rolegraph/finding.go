package rolegraph

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Finding is one problem of one object, located by the spec field it
// concerns, and the condition it is reported under.
type Finding struct {
	Severity  hintsconfig.Severity
	Condition v1alpha1.ConditionType
	Reason    v1alpha1.ConditionReason
	// Field is the spec field concerned, such as "spec.hints[1]".
	Field string
	// Detail names what is at Field when that helps: a policy type, or the
	// HintPolicy a policyRef item runs.
	Detail string
	// Key is the parameter key concerned, when the problem is one
	// parameter's (its path, such as adaptive.load_scale, when nested).
	Key     string
	Message string
}

// KeyField is the field of the parameter key the finding concerns, such
// as "spec.hints[1].parameters.ttl_seconds", or Field when the finding
// names no key or its field holds no parameters.
func (f Finding) KeyField() string {
	switch {
	case f.Key == "":
		return f.Field
	case strings.HasSuffix(f.Field, ".parameters"):
		return f.Field + "." + f.Key
	case strings.HasPrefix(f.Field, "spec.hints[") && !strings.Contains(f.Field, "]."):
		return f.Field + ".parameters." + f.Key
	}
	return f.Field
}

// Location renders where the finding is: "spec.hints[1] (kv-retain)".
func (f Finding) Location() string {
	if f.Detail == "" {
		return f.Field
	}
	return fmt.Sprintf("%s (%s)", f.Field, f.Detail)
}

// String renders "spec.hints[1] (kv-retain): InvalidParameters: ...".
func (f Finding) String() string {
	return fmt.Sprintf("%s: %s: %s", f.Location(), f.Reason, f.Message)
}

// Findings is every finding of one object.
type Findings []Finding

// Errors returns the findings that block the object.
func (fs Findings) Errors() Findings {
	return fs.filter(func(f Finding) bool { return f.Severity == hintsconfig.SeverityError })
}

// Warnings returns the findings that do not block it.
func (fs Findings) Warnings() Findings {
	return fs.filter(func(f Finding) bool { return f.Severity == hintsconfig.SeverityWarning })
}

// For returns the findings reported under one condition.
func (fs Findings) For(c v1alpha1.ConditionType) Findings {
	return fs.filter(func(f Finding) bool { return f.Condition == c })
}

func (fs Findings) filter(keep func(Finding) bool) Findings {
	var out Findings
	for _, f := range fs {
		if keep(f) {
			out = append(out, f)
		}
	}
	return out
}

// maxMessage keeps condition messages readable and far below the API's
// 32768-character limit; a role with more problems than fit says how many
// are left out.
const maxMessage = 4096

// message renders findings as one condition message. The first is written
// without its reason, which the condition carries; later ones with theirs.
func (fs Findings) message() string {
	var b strings.Builder
	for i, f := range fs {
		var s string
		if i == 0 {
			s = fmt.Sprintf("%s: %s", f.Location(), f.Message)
		} else {
			s = "; " + f.String()
		}
		if b.Len()+len(s) > maxMessage {
			fmt.Fprintf(&b, "; and %d more", len(fs)-i)
			break
		}
		b.WriteString(s)
	}
	return b.String()
}

// roleFinding turns a problem the hints core found in a role into a
// finding on the RouterRole field it comes from.
func roleFinding(p hintsconfig.Problem, spec *v1alpha1.RouterRoleSpec) Finding {
	f := Finding{
		Severity:  p.Severity,
		Condition: v1alpha1.ConditionAccepted,
		Reason:    v1alpha1.ConditionReason(p.Reason),
		Detail:    p.Type,
		Key:       p.Key,
		Message:   p.Message,
	}
	switch {
	case p.Hint != hintsconfig.NoHint:
		f.Field = fmt.Sprintf("spec.hints[%d]", p.Hint)
		if p.Hint < len(spec.Hints) && spec.Hints[p.Hint].PolicyRef != nil {
			f.Detail = fmt.Sprintf("HintPolicy %s, %s", spec.Hints[p.Hint].PolicyRef.Name, p.Type)
		}
	case p.Reason == hintsconfig.ReasonUnknownWorkerSelection:
		f.Field = "spec.workerSelection.type"
	case p.Reason == hintsconfig.ReasonInvalidParameters && p.Type == spec.WorkerSelection.Type:
		f.Field = "spec.workerSelection.parameters"
	case p.Reason == hintsconfig.ReasonInvalidRouterMode:
		f.Field = "spec.routerMode"
	case p.Reason == hintsconfig.ReasonInvalidRole:
		f.Field = "spec.role"
	default:
		// The rules about the list as a whole (KV-copy senders, hints off
		// the KV path, too many hints) and problems of default hints.
		f.Field = "spec.hints"
	}
	return f
}

// conflictFinding is the finding of a RouterRole that lost its role on its
// router to winner.
func conflictFinding(rr, winner *v1alpha1.RouterRole) Finding {
	return errorf(v1alpha1.ConditionAccepted, v1alpha1.ReasonRoleConflict, "spec.role",
		"RouterRole %s claims role %s on router %s too and was created first (or at the same time, with a name that sorts first); change spec.role or delete one of the two",
		winner.Name, rr.Spec.Role, rr.Spec.Router)
}

func errorf(c v1alpha1.ConditionType, reason v1alpha1.ConditionReason, field, format string, args ...any) Finding {
	return Finding{
		Severity: hintsconfig.SeverityError, Condition: c, Reason: reason, Field: field,
		Message: fmt.Sprintf(format, args...),
	}
}

// CatalogFinding is the finding every RouterRole of a router gets when the
// catalog the router declares (a ConfigMap labelled
// v1alpha1.CatalogForLabel) cannot be used: reason InvalidCatalog or
// CatalogConflict, configMaps the ConfigMaps concerned, msg why. The
// manager and `kvhint validate -f` give the same one.
func CatalogFinding(reason v1alpha1.ConditionReason, router, configMaps, msg string) Finding {
	return Finding{
		Severity:  hintsconfig.SeverityError,
		Condition: v1alpha1.ConditionAccepted,
		Reason:    reason,
		Field:     "spec.router",
		Detail:    "ConfigMap " + configMaps,
		Message: msg + fmt.Sprintf("; until it is fixed nothing of router %s is checked, its roles keep their last good entries and ConfigMap %s is left as it is",
			router, v1alpha1.HintsConfigMapName(router)),
	}
}

// Declaration is what a router's declared catalog says: the types its
// build links, the policy-file form it reads (empty when it does not say:
// RouterForm then picks the target's) and the Dynamo version it runs
// (empty when it does not say: see DialectOf).
type Declaration struct {
	Catalog       *hints.Catalog
	Form          hintsconfig.Form
	DynamoVersion string
}

// RouterCatalog picks the declaration a router's roles are compiled
// against from the ConfigMaps that declare it (labelled
// v1alpha1.CatalogForLabel with the router's name; at least one): the one
// declaration load reads from its v1alpha1.CatalogKey, or a
// CatalogFinding when there are several (CatalogConflict) or the one
// cannot be used (InvalidCatalog).
func RouterCatalog(router string, cms []corev1.ConfigMap, load func(*corev1.ConfigMap) (Declaration, error)) (Declaration, *Finding) {
	if len(cms) > 1 {
		names := make([]string, len(cms))
		for i := range cms {
			names[i] = cms[i].Name
		}
		slices.Sort(names)
		f := CatalogFinding(v1alpha1.ReasonCatalogConflict, router, strings.Join(names, ", "),
			fmt.Sprintf("%d ConfigMaps declare the catalog of router %s (label %s=%s): %s; keep one",
				len(cms), router, v1alpha1.CatalogForLabel, router, strings.Join(names, ", ")))
		return Declaration{}, &f
	}
	cm := &cms[0]
	d, err := load(cm)
	if err != nil {
		f := CatalogFinding(v1alpha1.ReasonInvalidCatalog, router, cm.Name,
			fmt.Sprintf("ConfigMap %s declares the catalog of router %s, but it cannot be used: %v", cm.Name, router, err))
		return Declaration{}, &f
	}
	return d, nil
}
