package rolegraph

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// The flags and environment variables Dynamo's router reads its mode and
// policy file from; the flag wins over the variable.
const (
	RouterModeFlag         = "--router-mode"
	RouterModeEnv          = "DYN_ROUTER_MODE"
	RouterPolicyConfigFlag = "--router-policy-config"
	RouterPolicyConfigEnv  = v1alpha1.RouterPolicyConfigEnv
)

// DefaultRouterMode is the mode Dynamo's router runs in when neither
// --router-mode nor DYN_ROUTER_MODE is given.
const DefaultRouterMode = hintsconfig.ModeRoundRobin

// Workload is a router workload that opted in to restart mode: a
// Deployment (v1alpha1.OptedIn) or a DynamoGraphDeployment
// (v1alpha1.GraphOptedIn), as its pod template says the router will
// start.
type Workload struct {
	// APIVersion, Kind, Name and UID are the workload's.
	APIVersion, Kind string
	Name             string
	UID              types.UID
	// Component is the DynamoGraphDeployment's component that runs the
	// router; empty for a Deployment.
	Component string
	// Writable is true when the manager may add its three entries
	// (v1alpha1.RouterContainerAnnotation) to the pod template: the
	// router container is found and would read the file they mount
	// (NotRead is empty). Nothing is written otherwise.
	Writable bool
	// References is the ConfigMap the manager's volume
	// (v1alpha1.PolicyVolumeName) names now; empty before the manager's
	// first write.
	References string
	// Entries is true when the router container already mounts the
	// manager's volume read-only at v1alpha1.PolicyMountPath and its
	// v1alpha1.RouterPolicyConfigEnv names v1alpha1.PolicyFilePath: with
	// References the current revision, nothing needs writing.
	Entries bool
	// Container is the router container; empty when none is found.
	Container string
	// Mode is the router mode the container starts with, and ModeOrigin
	// says where it came from, for messages: the flag or the variable and
	// the container.
	Mode       hintsconfig.RouterMode
	ModeOrigin string
	// NotRead, when not empty, says why the router would not start with
	// the policy file the manager mounts (see ReadTemplate), and Blocked is
	// the reason reported for it (v1alpha1.ReasonPolicyFileNotRead unless
	// another says more).
	NotRead string
	Blocked v1alpha1.ConditionReason
	// NotWritten, when not empty, says why the manager's last write of
	// the current config to the workload was refused
	// (Input.WriteRefusals); the roles report it as
	// v1alpha1.ReasonPolicyConfigNotWritten.
	NotWritten string
	// Replicas is the desired number of router pods.
	Replicas int32
	// RolloutFailed, when not empty, is the workload's message for a
	// rollout of its current template that stopped: a Deployment past its
	// progress deadline (Progressing=False, ProgressDeadlineExceeded), a
	// DynamoGraphDeployment that reports failure or no progress within
	// GraphProgressDeadline.
	RolloutFailed string
	// Unsettled, when not empty, says why the workload's controller does
	// not yet report its current template rolled out (a
	// DynamoGraphDeployment's status; see ReadGraph). Programmed waits
	// for it as for the pods.
	Unsettled string
	// RecheckAt, when not zero, is when the workload is to be looked at
	// again without an event: the end of a DynamoGraphDeployment's
	// progress deadline.
	RecheckAt time.Time
	// Warnings are said in Programmed's message: what the write will cost
	// that the owner may not expect.
	Warnings []string
	// overrides: as Template's.
	overrides []hintsconfig.InstanceOverride
	// version is the Dynamo version the workload says its Frontend runs
	// (a component's runtimeVersion, else the image tag), and versionFrom
	// where it came from, for messages; presets are the router presets its
	// container sets, by flag (see DialectOf, presetsSet).
	version, versionFrom string
	presets              map[string]string
	// graph and component select a DynamoGraphDeployment's router pods
	// by Dynamo's labels; empty for a Deployment, whose pods are all the
	// router's.
	graph string
}

// WorkloadKind is the kind of an opted-in Deployment.
const WorkloadKind = "Deployment"

// where names the workload in messages: "Deployment x".
func (w *Workload) where() string { return w.Kind + " " + w.Name }

// owns reports whether a router pod belongs to the workload: any router
// pod of a Deployment's (as before DynamoGraphDeployments), a
// DynamoGraphDeployment's router component's pods by Dynamo's labels.
func (w *Workload) owns(p *corev1.Pod) bool {
	if w.graph == "" {
		return true
	}
	return p.Labels[dynamograph.GraphLabel] == w.graph && p.Labels[dynamograph.ComponentLabel] == w.Component
}

// workloadsOf returns the opted-in Deployments and DynamoGraphDeployments
// of each router, sorted by kind and name. A workload without the opt-in
// is not one the manager may touch, and is left out.
func workloadsOf(deps []appsv1.Deployment, graphs []dynamograph.Graph, now time.Time) map[string][]*Workload {
	out := map[string][]*Workload{}
	for i := range graphs {
		g := &graphs[i]
		router := g.Labels[v1alpha1.RouterLabel]
		if !v1alpha1.GraphOptedIn(g.Annotations) || router == "" || g.DeletionTimestamp != nil {
			continue
		}
		out[router] = append(out[router], ReadGraph(g, now))
	}
	for i := range deps {
		d := &deps[i]
		router := d.Labels[v1alpha1.RouterLabel]
		if !v1alpha1.OptedIn(d.Annotations) || router == "" || d.DeletionTimestamp != nil {
			continue
		}
		out[router] = append(out[router], ReadWorkload(d))
	}
	for _, ws := range out {
		slices.SortFunc(ws, func(a, b *Workload) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
	}
	return out
}

// ReadWorkload reads what an opted-in Deployment's pod template says about
// its router: which container, the router mode, whether the container
// would read the policy file the manager mounts, and whether the
// manager's entries are in place.
func ReadWorkload(d *appsv1.Deployment) *Workload {
	w := &Workload{APIVersion: "apps/v1", Kind: WorkloadKind, Name: d.Name, UID: d.UID, Replicas: 1}
	if d.Spec.Replicas != nil {
		w.Replicas = *d.Spec.Replicas
	}
	w.RolloutFailed = rolloutFailure(d)
	t := ReadTemplate(fmt.Sprintf("Deployment %s", d.Name), &d.Spec.Template.Spec, DeploymentContainer(d), nil)
	w.Container, w.Mode, w.ModeOrigin, w.NotRead = t.Container, t.Mode, t.ModeOrigin, t.NotRead
	w.References, w.Entries, w.overrides = t.References, t.Entries, t.Overrides
	w.presets = t.Presets
	if tag := imageTag(t.Image); tag != "" {
		w.version, w.versionFrom = tag, fmt.Sprintf("the image tag of container %q of Deployment %s", t.Container, d.Name)
	}
	w.Writable = w.NotRead == ""
	w.Blocked = v1alpha1.ReasonPolicyFileNotRead
	return w
}

// ContainerChoice says how the router container of a pod template is
// found: by Name, or as the first container that mounts Volume.
// Annotation names what said so, for messages ("annotation x").
type ContainerChoice struct {
	Name, Volume, Annotation string
}

// DeploymentContainer is how an opted-in Deployment names its router
// container: v1alpha1.RouterContainerAnnotation, else the first container
// that mounts the volume v1alpha1.PolicyVolumeAnnotation names.
func DeploymentContainer(d *appsv1.Deployment) ContainerChoice {
	if name, ok := d.Annotations[v1alpha1.RouterContainerAnnotation]; ok {
		return ContainerChoice{Name: name, Annotation: "annotation " + v1alpha1.RouterContainerAnnotation}
	}
	return ContainerChoice{Volume: d.Annotations[v1alpha1.PolicyVolumeAnnotation], Annotation: "annotation " + v1alpha1.PolicyVolumeAnnotation}
}

// Template is what a router's pod template says about how the router
// starts, for the start-up checks and the rollout (see ReadTemplate).
type Template struct {
	// Container is the router container, empty when none is found.
	Container string
	// Mode and ModeOrigin: as Workload's.
	Mode       hintsconfig.RouterMode
	ModeOrigin string
	// NotRead, when not empty, says why the router would not start with
	// the policy file the manager mounts.
	NotRead string
	// References and Entries: as Workload's.
	References string
	Entries    bool
	// Overrides are the settings that pick a worker-selection instance
	// outside the policy file, checked against the compiled file
	// (checkOverrides).
	Overrides []hintsconfig.InstanceOverride
	// Image is the router container's image; Presets the router presets
	// it sets (presetsSet).
	Image   string
	Presets map[string]string
}

// ReadTemplate reads a router's pod template: where names the workload
// for messages ("Deployment x"), choice how its router container is
// found, and env holds variables set before the container's own (a
// DynamoGraphDeployment's spec.env), which the container's own of the
// same name override.
//
// The manager mounts the policy file itself (v1alpha1.PolicyVolumeName at
// v1alpha1.PolicyMountPath) and sets v1alpha1.RouterPolicyConfigEnv to
// it. A container that names another file, by --router-policy-config
// (which wins over the variable) or by the variable, would start with
// that file instead: NotRead says so, and the manager writes nothing
// rather than overwrite what the template's owner set.
func ReadTemplate(where string, spec *corev1.PodSpec, choice ContainerChoice, env []corev1.EnvVar) Template {
	var t Template
	t.Mode, t.ModeOrigin = DefaultRouterMode, fmt.Sprintf("the default router mode (no %s nor %s in %s)", RouterModeFlag, RouterModeEnv, where)

	var c *corev1.Container
	switch {
	case choice.Name != "":
		for i := range spec.Containers {
			if spec.Containers[i].Name == choice.Name {
				c = &spec.Containers[i]
			}
		}
		if c == nil {
			t.NotRead = fmt.Sprintf("%s: %s names container %q, but the pod template has no container of that name", where, choice.Annotation, choice.Name)
			return t
		}
	case choice.Volume != "":
		for i := range spec.Containers {
			for j := range spec.Containers[i].VolumeMounts {
				if spec.Containers[i].VolumeMounts[j].Name == choice.Volume && c == nil {
					c = &spec.Containers[i]
				}
			}
		}
		if c == nil {
			t.NotRead = fmt.Sprintf("%s: %s names volume %q, but no container mounts it; name the router container with annotation %s instead",
				where, choice.Annotation, choice.Volume, v1alpha1.RouterContainerAnnotation)
			return t
		}
	default:
		t.NotRead = fmt.Sprintf("%s: %s is empty; it names the router container", where, choice.Annotation)
		return t
	}
	t.Container, t.Image = c.Name, c.Image
	merged := *c
	merged.Env = append(slices.Clone(env), c.Env...)
	where = fmt.Sprintf("container %q of %s", c.Name, where)
	t.ModeOrigin = fmt.Sprintf("the default router mode (no %s nor %s in %s)", RouterModeFlag, RouterModeEnv, where)
	v, from, modeSet := setting(&merged, RouterModeFlag, RouterModeEnv)
	if modeSet {
		t.Mode, t.ModeOrigin = hintsconfig.RouterMode(v), fmt.Sprintf("%s of %s", from, where)
	}

	for i := range spec.Volumes {
		if v := &spec.Volumes[i]; v.Name == v1alpha1.PolicyVolumeName {
			if v.ConfigMap == nil {
				t.NotRead = fmt.Sprintf("%s: the pod template has a volume %q that is not a configMap volume; that name is the manager's (the compiled config is mounted under it)", where, v.Name)
				return t
			}
			t.References = v.ConfigMap.Name
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != v1alpha1.PolicyMountPath {
			continue
		}
		if m.Name != v1alpha1.PolicyVolumeName {
			t.NotRead = fmt.Sprintf("%s mounts volume %q at %s, where the manager mounts the compiled config; mount it elsewhere", where, m.Name, v1alpha1.PolicyMountPath)
			return t
		}
		mounted = m.ReadOnly && m.SubPath == ""
	}
	t.Presets = presetsSet(where, &merged)
	if !modeSet && len(t.Presets) > 0 {
		// Dynamo 1.7's presets imply --router-mode kv; a Frontend that
		// has them is 1.7 or newer (an older one refuses the flag).
		first := t.Presets[slices.Min(slices.Collect(maps.Keys(t.Presets)))]
		t.Mode, t.ModeOrigin = hintsconfig.ModeKV, first+" (a Dynamo router preset, which implies "+RouterModeFlag+" kv)"
	}
	t.NotRead = policyFileNotRead(where, &merged)
	t.Overrides = instanceOverrides(where, &merged)
	t.Entries = mounted && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == RouterPolicyConfigEnv && e.ValueFrom == nil && e.Value == v1alpha1.PolicyFilePath
	})
	return t
}

// instanceOverrides reads the settings of container c (env merged) that
// pick a worker-selection instance by name: a stage's flag or variable,
// and the variable for every role.
func instanceOverrides(where string, c *corev1.Container) []hintsconfig.InstanceOverride {
	var out []hintsconfig.InstanceOverride
	for _, s := range []struct{ role, flag, env string }{
		{string(v1alpha1.RolePrefill), hintsconfig.PrefillPolicyFlag, hintsconfig.PrefillPolicyEnv},
		{string(v1alpha1.RoleDecode), hintsconfig.DecodePolicyFlag, hintsconfig.DecodePolicyEnv},
	} {
		if v, from, ok := setting(c, s.flag, s.env); ok {
			out = append(out, hintsconfig.InstanceOverride{Role: s.role, Setting: from + " of " + where, Value: v})
		}
	}
	for _, e := range c.Env {
		if e.Name == hintsconfig.WorkerSelectionPolicyEnv && e.ValueFrom == nil {
			out = append(out, hintsconfig.InstanceOverride{Setting: e.Name + " of " + where, Value: e.Value})
		}
	}
	return out
}

// checkOverrides refuses to write the compiled file to a workload whose
// template picks a worker-selection instance the file does not have: the
// router would not start (hintsconfig.CheckInstanceOverrides).
func (w *Workload) checkOverrides(policyFile []byte) {
	if !w.Writable || len(w.overrides) == 0 || policyFile == nil {
		return
	}
	probs, err := hintsconfig.CheckInstanceOverrides(policyFile, w.overrides)
	if err != nil || len(probs) == 0 {
		return
	}
	w.NotRead, w.Blocked, w.Writable = probs[0].Message, v1alpha1.ReasonRouterWouldNotStart, false
}

// policyFileNotRead says why container c (env merged) would start with
// another policy file than the one the manager mounts: a
// --router-policy-config flag or a RouterPolicyConfigEnv of its owner's
// that names another path. Empty when it would read the manager's.
func policyFileNotRead(where string, c *corev1.Container) string {
	got, from, ok := setting(c, RouterPolicyConfigFlag, RouterPolicyConfigEnv)
	switch {
	case ok && path.Clean(got) != v1alpha1.PolicyFilePath:
		return fmt.Sprintf("%s sets %s to %s: the router would read that file, not the compiled config the manager mounts at %s; remove the setting (the manager sets %s), it is not overwritten",
			where, from, got, v1alpha1.PolicyFilePath, RouterPolicyConfigEnv)
	case !ok && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == RouterPolicyConfigEnv && e.ValueFrom != nil }):
		return fmt.Sprintf("%s sets %s by valueFrom: the router may read another file than the compiled config the manager mounts at %s; remove it (the manager sets it), it is not overwritten",
			where, RouterPolicyConfigEnv, v1alpha1.PolicyFilePath)
	}
	return ""
}

// setting reads one of the router's settings from a container: the flag
// in its command or args (as "--flag value" or "--flag=value", also inside
// a shell command line; the last one wins, as with argparse), else the
// environment variable's literal value. from names where it was found.
func setting(c *corev1.Container, flag, env string) (value, from string, ok bool) {
	var words []string
	for _, s := range append(slices.Clone(c.Command), c.Args...) {
		words = append(words, strings.Fields(s)...)
	}
	for i, w := range words {
		switch {
		case w == flag && i+1 < len(words):
			value, ok = strings.Trim(words[i+1], `'"`), true
		case strings.HasPrefix(w, flag+"="):
			value, ok = strings.Trim(strings.TrimPrefix(w, flag+"="), `'"`), true
		}
	}
	if ok {
		return value, flag, true
	}
	for _, e := range c.Env {
		if e.Name == env && e.ValueFrom == nil {
			value, ok = e.Value, true
		}
	}
	return value, env, ok
}

// rolloutFailure returns the Deployment's message when its rollout of the
// current template is past its progress deadline; empty otherwise. A
// condition the controller set before it saw the current generation is
// about an older template, and does not count.
func rolloutFailure(d *appsv1.Deployment) string {
	if d.Status.ObservedGeneration < d.Generation {
		return ""
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return fmt.Sprintf("Deployment %s: %s", d.Name, c.Message)
		}
	}
	return ""
}

// modes is how the roles of a restart-mode router are compiled: under
// the mode its first workload's template starts the router with, named in
// messages by the flag and its value.
func (w *Workload) modes() hintsconfig.Modes {
	return hintsconfig.Modes{Default: w.Mode, Flag: w.ModeOrigin}
}

// PolicyFileFinding is the verdict that a restart-mode router would start
// without the compiled policy file: the first of its workloads whose
// template says so (Workload.NotRead), as a PolicyFileNotRead error under
// Programmed, or nil. The manager reports it as the Programmed condition
// of the router's roles, and `kvhint validate -f` as a finding of each of
// them, so both reach it through this one function.
func PolicyFileFinding(workloads []*Workload) *Finding {
	for _, w := range workloads {
		if w.NotRead != "" {
			reason := w.Blocked
			if reason == "" {
				reason = v1alpha1.ReasonPolicyFileNotRead
			}
			return &Finding{
				Severity:  hintsconfig.SeverityError,
				Condition: v1alpha1.ConditionProgrammed,
				Reason:    reason,
				Field:     "spec.router",
				Detail:    w.where(),
				Message:   w.NotRead,
			}
		}
	}
	return nil
}
