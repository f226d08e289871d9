package rolegraph

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
)

// GraphProgressDeadline is how long a DynamoGraphDeployment that has seen
// its current generation may report Ready=False before its rollout is
// RolloutFailed: Kubernetes' default progress deadline of a Deployment.
const GraphProgressDeadline = 10 * time.Minute

// ReadGraph reads what an opted-in DynamoGraphDeployment says about its
// router: the component that runs it (v1alpha1.RouterComponentAnnotation,
// dynamograph.Graph.FindHost), that component's pod template as Dynamo's
// operator renders it (spec.env first, the container's own entries
// winning), the checks a Frontend's start-up makes of it, and how far
// Dynamo's status says its current generation has rolled out. now dates
// the progress deadline.
//
// The manager writes only the DGD (Dynamo's operator replaces any change
// to the Deployments or PodCliques it renders), and nothing to one whose
// router would not start with the file (NotRead).
func ReadGraph(g *dynamograph.Graph, now time.Time) *Workload {
	w := &Workload{
		APIVersion: dynamograph.GroupVersion.String(), Kind: dynamograph.Kind,
		Name: g.Name, UID: g.UID, Replicas: 1, graph: g.Name,
		Blocked: v1alpha1.ReasonInvalidRouterWorkload,
	}
	where := w.where()
	annotation := "annotation " + v1alpha1.RouterComponentAnnotation
	host, err := g.FindHost(g.Annotations[v1alpha1.RouterComponentAnnotation])
	if err != nil {
		w.NotRead = fmt.Sprintf("%s: %s %v", where, annotation, err)
		return w
	}
	c := host.Component
	w.Component = c.Name
	if c.Replicas != nil {
		w.Replicas = *c.Replicas
	}
	where = fmt.Sprintf("component %q of %s", c.Name, where)
	if c.PodTemplate == nil {
		w.NotRead = fmt.Sprintf("%s has no podTemplate: the manager adds its entries to container %q of it; give the component a podTemplate with that container", where, host.Container)
		return w
	}
	choice := ContainerChoice{Name: host.Container, Annotation: "the component's type"}
	if host.Sidecar {
		choice.Annotation = "frontendSidecar"
	}
	t := ReadTemplate(where, &c.PodTemplate.Spec, choice, g.Spec.Env)
	w.Container, w.Mode, w.ModeOrigin, w.NotRead = t.Container, t.Mode, t.ModeOrigin, t.NotRead
	w.References, w.Entries, w.overrides = t.References, t.Entries, t.Overrides
	w.presets = t.Presets
	switch tag := imageTag(t.Image); {
	case c.RuntimeVersion != "":
		w.version, w.versionFrom = c.RuntimeVersion, "runtimeVersion of "+where
	case tag != "":
		w.version, w.versionFrom = tag, fmt.Sprintf("the image tag of container %q of %s", t.Container, where)
	}
	if t.NotRead != "" {
		if t.Container != "" {
			w.Blocked = v1alpha1.ReasonPolicyFileNotRead
		}
		return w
	}
	router := g.Labels[v1alpha1.RouterLabel]
	if got := c.PodTemplate.Labels[v1alpha1.RouterLabel]; got != router {
		w.NotRead = fmt.Sprintf("%s: podTemplate.metadata.labels has %s=%q, not %q: the manager finds the router's pods by that label (it counts them for Programmed), and adds nothing else to the template; set it",
			where, v1alpha1.RouterLabel, got, router)
		return w
	}
	if c.Type == dynamograph.TypeEPP && !hasEnv(g.Spec.Env, &c.PodTemplate.Spec, t.Container, dynamograph.EPPMaxBatchedTokensEnv) {
		w.NotRead = fmt.Sprintf("%s: an EPP given a policy config needs %s, and neither the container %q nor spec.env sets it: the EPP would not start with the compiled config; set it",
			where, dynamograph.EPPMaxBatchedTokensEnv, t.Container)
		w.Blocked = v1alpha1.ReasonRouterWouldNotStart
		return w
	}
	onGrove := g.OnGrove()
	if onGrove && g.Annotations[dynamograph.GroveUpdateStrategyAnnotation] == dynamograph.GroveOnDelete {
		w.NotRead = fmt.Sprintf("%s: annotation %s is %s: on Grove its pods take a new template only when they are deleted, so a compiled config would reach no pod of its own accord; "+
			"nothing is written while it is set (remove it, and Grove rolls with RollingRecreate)",
			w.where(), dynamograph.GroveUpdateStrategyAnnotation, dynamograph.GroveOnDelete)
		w.Blocked = v1alpha1.ReasonUpdateStrategyOnDelete
		return w
	}
	w.Blocked = ""
	w.Writable = true
	if onGrove && w.Replicas == 1 {
		w.Warnings = append(w.Warnings, fmt.Sprintf("%s has one replica on Grove, whose RollingRecreate stops a pod before its replacement starts: each config change is a gap in serving; run two or more", where))
	}
	if host.Sidecar {
		w.Warnings = append(w.Warnings, fmt.Sprintf("the router is the frontendSidecar %q of %s: a config change rolls the component's pods, its workers with it", t.Container, where))
	}
	w.RolloutFailed, w.Unsettled, w.RecheckAt = graphProgress(g, c.Name, w.Replicas, now)
	return w
}

// hasEnv reports whether container name of spec, or the graph-wide env,
// sets the variable.
func hasEnv(graphEnv []corev1.EnvVar, spec *corev1.PodSpec, name, env string) bool {
	has := func(e corev1.EnvVar) bool { return e.Name == env }
	if slices.ContainsFunc(graphEnv, has) {
		return true
	}
	for _, c := range spec.Containers {
		if c.Name == name && slices.ContainsFunc(c.Env, has) {
			return true
		}
	}
	return false
}

// graphProgress reads a DGD's status for its router component: failed
// (Dynamo's state failed, or Ready False past GraphProgressDeadline on the
// current generation), or not yet settled (the generation not observed,
// Ready not True, the component's replicas not all updated and ready),
// and when to look again.
func graphProgress(g *dynamograph.Graph, component string, replicas int32, now time.Time) (failed, unsettled string, recheck time.Time) {
	st := &g.Status
	if st.ObservedGeneration < g.Generation {
		return "", fmt.Sprintf("Dynamo's operator has not yet reconciled generation %d of %s (status.observedGeneration %d)", g.Generation, g.Kind+" "+g.Name, st.ObservedGeneration), time.Time{}
	}
	where := dynamograph.Kind + " " + g.Name
	ready := g.Condition(dynamograph.ConditionReady)
	if st.State == dynamograph.StateFailed {
		return fmt.Sprintf("%s reports state %s%s", where, st.State, conditionSays(ready)), "", time.Time{}
	}
	var why []string
	if ready == nil || ready.Status != metav1.ConditionTrue {
		why = append(why, "Ready is not True"+conditionSays(ready))
	}
	cs, ok := st.Components[component]
	var ready32 int32
	if ok && cs.ReadyReplicas != nil {
		ready32 = *cs.ReadyReplicas
	}
	switch {
	case !ok:
		why = append(why, fmt.Sprintf("status.components has no %q yet", component))
	case cs.UpdatedReplicas != replicas || cs.Replicas != replicas || ready32 != replicas:
		why = append(why, fmt.Sprintf("component %q has %d updated and %d ready of %d replicas (%d running)", component, cs.UpdatedReplicas, ready32, replicas, cs.Replicas))
	}
	if len(why) == 0 {
		return "", "", time.Time{}
	}
	unsettled = where + ": " + strings.Join(why, "; ")
	if ready != nil && ready.Status == metav1.ConditionFalse {
		// The deadline runs from the later of Ready's fall and the
		// manager's last write: a graph not Ready for long before the
		// write did not fail to roll it out.
		since := ready.LastTransitionTime.Time
		if at := writtenAt(g); at.After(since) {
			since = at
		}
		deadline := since.Add(GraphProgressDeadline)
		if !now.Before(deadline) {
			return fmt.Sprintf("%s: no progress in %s: %s", where, GraphProgressDeadline, strings.Join(why, "; ")), "", time.Time{}
		}
		recheck = deadline
	}
	return "", unsettled, recheck
}

// writtenAt is when the manager last applied its entries to the DGD, as
// the API server recorded it in managedFields; zero if never.
func writtenAt(g *dynamograph.Graph) time.Time {
	var at time.Time
	for _, mf := range g.ManagedFields {
		if mf.Manager == v1alpha1.RolloutFieldManager && mf.Time != nil && mf.Time.After(at) {
			at = mf.Time.Time
		}
	}
	return at
}

func conditionSays(c *metav1.Condition) string {
	if c == nil {
		return ""
	}
	if c.Message == "" {
		return fmt.Sprintf(" (%s)", c.Reason)
	}
	return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
}
