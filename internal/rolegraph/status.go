package rolegraph

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// roleStatus computes a RouterRole's status from its placement, starting
// from the status it has so that transition times move only on a flip.
func roleStatus(rr *v1alpha1.RouterRole, p *placement, now metav1.Time) v1alpha1.RouterRoleStatus {
	st := *rr.Status.DeepCopy()
	accepted := acceptedCondition(rr, p)
	resolved := resolvedRefsCondition(rr, p)
	programmed := programmedCondition(rr, p)
	ready := readyCondition(rr, accepted, resolved, programmed)
	for _, c := range []metav1.Condition{accepted, resolved, programmed, ready} {
		c.LastTransitionTime = now
		meta.SetStatusCondition(&st.Conditions, c)
	}
	// What waiting cannot fix: a rejected spec, an unresolved reference,
	// and a ConfigMap of someone else's in the compiled config's place.
	blocking := []metav1.Condition{accepted, resolved}
	switch v1alpha1.ConditionReason(programmed.Reason) {
	case v1alpha1.ReasonConfigMapConflict, v1alpha1.ReasonRolloutFailed, v1alpha1.ReasonPolicyFileNotRead, v1alpha1.ReasonPolicyConfigNotWritten,
		v1alpha1.ReasonInvalidRouterWorkload, v1alpha1.ReasonRouterWouldNotStart, v1alpha1.ReasonUpdateStrategyOnDelete:
		blocking = append(blocking, programmed)
	}
	setAbnormal(&st.Conditions, v1alpha1.ConditionStalled, stalledCondition(rr.Generation, ready, blocking...), now)
	setAbnormal(&st.Conditions, v1alpha1.ConditionReconciling, reconcilingCondition(rr.Generation, ready, blocking...), now)
	setAbnormal(&st.Conditions, v1alpha1.ConditionPolicyEjected, policyEjectedCondition(rr, p), now)
	st.ObservedGeneration = rr.Generation

	st.EffectiveHints = nil
	if p.runs != nil {
		for _, h := range p.runs.Hints {
			st.EffectiveHints = append(st.EffectiveHints, v1alpha1.EffectiveHint{Type: h.Type, Name: h.Name, Parameters: jsonOrNil(h.Params)})
		}
	}
	st.RouterPods = nil
	if p.router != nil {
		st.RouterPods = &v1alpha1.RouterPods{
			Hash:     p.pods.hash,
			Total:    p.pods.total,
			UpToDate: p.pods.upToDate,
			Summary:  fmt.Sprintf("%d/%d", p.pods.upToDate, p.pods.total),
		}
	}
	return st
}

func condition(t v1alpha1.ConditionType, ok bool, reason v1alpha1.ConditionReason, generation int64, msg string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: string(t), Status: status, Reason: string(reason), ObservedGeneration: generation, Message: msg}
}

func acceptedCondition(rr *v1alpha1.RouterRole, p *placement) metav1.Condition {
	gen := rr.Generation
	findings := p.res.findings.For(v1alpha1.ConditionAccepted)
	if errs := findings.Errors(); len(errs) > 0 {
		msg := errs.message()
		if p.runs != nil {
			msg += fmt.Sprintf(". The router keeps running generation %d", p.generation)
		}
		return condition(v1alpha1.ConditionAccepted, false, errs[0].Reason, gen, msg)
	}
	if warns := findings.Warnings(); len(warns) > 0 {
		reason := v1alpha1.ReasonAccepted
		if slices.ContainsFunc(warns, func(f Finding) bool { return f.Reason == v1alpha1.ReasonPresetOverridesParameters }) {
			// The role is accepted, but the router does not run it as
			// written: a reason a person (and kubectl wait) can see.
			reason = v1alpha1.ReasonPresetOverridesParameters
		}
		return condition(v1alpha1.ConditionAccepted, true, reason, gen,
			fmt.Sprintf("accepted with %d warning(s): %s: %s", len(warns), warns[0].Reason, warns.message()))
	}
	return condition(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, gen, "the role passes the catalog rules")
}

func resolvedRefsCondition(rr *v1alpha1.RouterRole, p *placement) metav1.Condition {
	gen := rr.Generation
	if errs := p.res.findings.For(v1alpha1.ConditionResolvedRefs).Errors(); len(errs) > 0 {
		return condition(v1alpha1.ConditionResolvedRefs, false, errs[0].Reason, gen, errs.message())
	}
	if len(p.res.refs) == 0 {
		return condition(v1alpha1.ConditionResolvedRefs, true, v1alpha1.ReasonResolvedRefs, gen, "the role references no HintPolicy")
	}
	return condition(v1alpha1.ConditionResolvedRefs, true, v1alpha1.ReasonResolvedRefs, gen,
		fmt.Sprintf("every policyRef resolves to an accepted HintPolicy: %s", strings.Join(p.res.refNames(), ", ")))
}

// programmedCondition says whether the config that holds the role runs on
// every router pod. Its observedGeneration is the generation that runs, so
// that `kubectl wait --for=condition=Programmed` (which compares it with
// metadata.generation) waits while a newer spec is not accepted.
//
// A router without pods is not Programmed: nothing runs the role, and
// Ready must not claim otherwise.
func programmedCondition(rr *v1alpha1.RouterRole, p *placement) metav1.Condition {
	gen := rr.Generation
	switch {
	case p.runs == nil && p.router != nil && p.router.Held != "":
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonNotAccepted, gen,
			fmt.Sprintf("ConfigMap %s is left as it is, so router pods run what it holds; no entry of the role in it could be checked: %s",
				v1alpha1.HintsConfigMapName(rr.Spec.Router), p.router.Held))
	case p.runs == nil && p.winner != nil:
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonNotAccepted, gen,
			fmt.Sprintf("router %s runs role %s from RouterRole %s", rr.Spec.Router, rr.Spec.Role, p.winner.Name))
	case p.runs == nil && p.router != nil && p.router.Config == nil:
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonNotAccepted, gen,
			fmt.Sprintf("nothing of the role runs: no generation of it has been accepted; no role of router %s is, so ConfigMap %s holds no %s "+
				"(a Dynamo router that mounts it does not start until a role is accepted), only %s",
				rr.Spec.Router, v1alpha1.HintsConfigMapName(rr.Spec.Router), v1alpha1.HintsConfigKey, v1alpha1.RolesKey))
	case p.runs == nil:
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonNotAccepted, gen,
			"nothing of the role runs: no generation of it has been accepted")
	}

	if p.router != nil && p.router.Conflict != "" {
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonConfigMapConflict, gen, p.router.Conflict)
	}

	var suffix string
	if p.generation != gen {
		suffix = fmt.Sprintf(" (generation %d, the last accepted; generation %d is not accepted)", p.generation, gen)
	}
	c := p.pods
	cm := v1alpha1.HintsConfigMapName(rr.Spec.Router)
	if c.restart {
		cm = v1alpha1.RevisionConfigMapName(rr.Spec.Router, c.hash)
		if f := PolicyFileFinding(p.router.Workloads); f != nil {
			return condition(v1alpha1.ConditionProgrammed, false, f.Reason, p.generation, f.Message)
		}
		for _, w := range p.router.Workloads {
			switch {
			case w.NotWritten != "":
				return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPolicyConfigNotWritten, p.generation,
					fmt.Sprintf("%d/%d router pods run %s; config %s is not written: %s", c.upToDate, c.total, orNone(c.hash), p.router.Hash, w.NotWritten))
			case w.RolloutFailed != "":
				return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonRolloutFailed, p.generation,
					fmt.Sprintf("%d/%d router pods run %s%s; the rollout of ConfigMap %s failed: %s", c.upToDate, c.total, c.hash, suffix, cm, w.RolloutFailed))
			}
		}
	}
	var unsettled, warnings []string
	if c.restart {
		for _, w := range p.router.Workloads {
			if w.Unsettled != "" {
				unsettled = append(unsettled, w.Unsettled)
			}
			warnings = append(warnings, w.Warnings...)
		}
	}
	if len(warnings) > 0 {
		suffix += "; warning: " + strings.Join(warnings, "; ")
	}
	switch {
	case c.total == 0:
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonNoRouterPods, p.generation,
			fmt.Sprintf("ConfigMap %s holds config %s%s, but no router pods (label %s=%s) run it yet",
				cm, c.hash, suffix, v1alpha1.RouterLabel, rr.Spec.Router))
	case c.upToDate < c.total:
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPending, p.generation,
			fmt.Sprintf("%d/%d router pods run %s%s", c.upToDate, c.total, c.hash, suffix))
	case len(unsettled) > 0:
		// Every pod runs it, but the workload's controller has not said
		// its rollout is over: more pods may come and go.
		return condition(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPending, p.generation,
			fmt.Sprintf("%d/%d router pods run %s%s; %s", c.upToDate, c.total, c.hash, suffix, strings.Join(unsettled, "; ")))
	}
	return condition(v1alpha1.ConditionProgrammed, true, v1alpha1.ReasonProgrammed, p.generation,
		fmt.Sprintf("%d/%d router pods run %s%s", c.upToDate, c.total, c.hash, suffix))
}

// readyCondition is True when the current generation is accepted, its
// references resolve and it runs on every router pod; otherwise it repeats
// the reason and message of the first of those that does not hold.
func readyCondition(rr *v1alpha1.RouterRole, conds ...metav1.Condition) metav1.Condition {
	gen := rr.Generation
	for _, c := range conds {
		if c.Status != metav1.ConditionTrue {
			return condition(v1alpha1.ConditionReady, false, v1alpha1.ConditionReason(c.Reason), gen, c.Type+": "+c.Message)
		}
		if c.ObservedGeneration != gen {
			return condition(v1alpha1.ConditionReady, false, v1alpha1.ReasonPending, gen,
				fmt.Sprintf("%s: generation %d is not programmed yet", c.Type, gen))
		}
	}
	programmed := conds[len(conds)-1]
	return condition(v1alpha1.ConditionReady, true, v1alpha1.ReasonReady, gen, "the role runs as specified: "+programmed.Message)
}

// maxEjectedNamed bounds the policies PolicyEjected's message names.
const maxEjectedNamed = 8

// policyEjectedCondition is True while a router pod's sidecar reports a
// hint policy of the role ejected: it names each, on how many of the
// router's pods and why. It is nil, and so absent, otherwise. Ready is not
// touched: the spec still runs on every pod, and ejection is the sidecar
// keeping its bookings fast while a policy misbehaves.
func policyEjectedCondition(rr *v1alpha1.RouterRole, p *placement) *metav1.Condition {
	if p.runs == nil || p.winner != nil {
		return nil
	}
	ejected := p.pods.ejected[rr.Spec.Role]
	if len(ejected) == 0 {
		return nil
	}
	names := sortedKeys(ejected)
	var parts []string
	for i, name := range names {
		if i == maxEjectedNamed {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-i))
			break
		}
		on := ejected[name]
		parts = append(parts, fmt.Sprintf("hint policy %s is ejected on %d/%d router pods (%s)", name, on.pods, p.pods.total, strings.Join(on.reasons, ", ")))
	}
	c := condition(v1alpha1.ConditionPolicyEjected, true, v1alpha1.ReasonPolicyEjected, rr.Generation,
		strings.Join(parts, "; ")+": bookings of the role answer without it until its sidecar re-admits it on probation (see kvhint_router_policy_ejections_total)")
	return &c
}

// stalledCondition is kstatus's Stalled, for a spec that waiting cannot
// fix: True when any of the spec conditions is False, with Ready's reason
// (the first failing condition's) and a message that names every failing
// condition, since a GitOps tool shows only this one. It is nil, and so
// absent, otherwise.
func stalledCondition(gen int64, ready metav1.Condition, spec ...metav1.Condition) *metav1.Condition {
	var msgs []string
	for _, c := range spec {
		if c.Status != metav1.ConditionTrue {
			msgs = append(msgs, fmt.Sprintf("%s=False (%s): %s", c.Type, c.Reason, c.Message))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	c := condition(v1alpha1.ConditionStalled, true, v1alpha1.ConditionReason(ready.Reason), gen, strings.Join(msgs, "; "))
	return &c
}

// reconcilingCondition is kstatus's Reconciling: True while the spec is
// accepted and resolved but not Ready, that is while it does not run on
// every router pod yet, with Ready's reason and message. It is nil, and
// so absent, otherwise.
func reconcilingCondition(gen int64, ready metav1.Condition, spec ...metav1.Condition) *metav1.Condition {
	if ready.Status == metav1.ConditionTrue {
		return nil
	}
	for _, c := range spec {
		if c.Status != metav1.ConditionTrue {
			return nil
		}
	}
	c := condition(v1alpha1.ConditionReconciling, true, v1alpha1.ConditionReason(ready.Reason), gen, ready.Message)
	return &c
}

// setAbnormal sets an "abnormal-true" condition of type t, or removes it
// when c is nil: kstatus reads an absent Stalled or Reconciling as False,
// and Flux's own objects carry them only while True.
func setAbnormal(conds *[]metav1.Condition, t v1alpha1.ConditionType, c *metav1.Condition, now metav1.Time) {
	if c == nil {
		meta.RemoveStatusCondition(conds, string(t))
		return
	}
	c.LastTransitionTime = now
	meta.SetStatusCondition(conds, *c)
}

// policyStatus computes a HintPolicy's status.
func policyStatus(hp *v1alpha1.HintPolicy, findings Findings, usedBy []string, now metav1.Time) v1alpha1.HintPolicyStatus {
	st := *hp.Status.DeepCopy()
	var c metav1.Condition
	switch errs, warns := findings.Errors(), findings.Warnings(); {
	case len(errs) > 0:
		c = condition(v1alpha1.ConditionAccepted, false, errs[0].Reason, hp.Generation, errs.message())
	case len(warns) > 0:
		c = condition(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, hp.Generation, "accepted with warnings: "+warns.message())
	default:
		c = condition(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, hp.Generation,
			fmt.Sprintf("hint policy type %s accepts the parameters", hp.Spec.Type))
	}
	c.LastTransitionTime = now
	meta.SetStatusCondition(&st.Conditions, c)
	setAbnormal(&st.Conditions, v1alpha1.ConditionStalled, stalledCondition(hp.Generation, c, c), now)
	st.UsedBy = usedBy
	st.ObservedGeneration = hp.Generation
	return st
}

// HintPolicyStatus computes the status of one HintPolicy, for the
// reconciler that writes it: usedBy names the RouterRoles that reference
// it, sorted.
func HintPolicyStatus(cat *hints.Catalog, hp *v1alpha1.HintPolicy, usedBy []string, now metav1.Time) (v1alpha1.HintPolicyStatus, Findings) {
	findings := checkPolicy(cat, hp)
	return policyStatus(hp, findings, usedBy, now), findings
}

// orNone is a hash, or "no config" when it is empty.
func orNone(hash string) string {
	if hash == "" {
		return "no config"
	}
	return hash
}
