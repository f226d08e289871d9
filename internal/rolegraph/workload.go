package rolegraph

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// The flags and environment variables Dynamo's router reads its mode and
// policy file from; the flag wins over the variable.
const (
	RouterModeFlag         = "--router-mode"
	RouterModeEnv          = "DYN_ROUTER_MODE"
	RouterPolicyConfigFlag = "--router-policy-config"
	RouterPolicyConfigEnv  = "DYN_ROUTER_POLICY_CONFIG"
)

// DefaultRouterMode is the mode Dynamo's router runs in when neither
// --router-mode nor DYN_ROUTER_MODE is given.
const DefaultRouterMode = hintsconfig.ModeRoundRobin

// Workload is a router Deployment that opted in to restart mode (it
// carries v1alpha1.PolicyVolumeAnnotation), as its pod template says the
// router will start.
type Workload struct {
	// Name and UID are the Deployment's.
	Name string
	UID  types.UID
	// Volume is the pod template volume that holds the policy file.
	Volume string
	// Writable is true when Volume is a configMap volume of the pod
	// template: the only kind the manager points at a compiled config.
	Writable bool
	// References is the ConfigMap the volume names now; empty when it
	// is not a configMap volume.
	References string
	// Container is the router container: the first container that
	// mounts Volume; empty when none does.
	Container string
	// Mode is the router mode the container starts with, and ModeOrigin
	// says where it came from, for messages: the flag or the variable and
	// the container.
	Mode       hintsconfig.RouterMode
	ModeOrigin string
	// NotRead, when not empty, says why the router container would not
	// read the mounted policy file.
	NotRead string
	// Replicas is the Deployment's desired number of pods.
	Replicas int32
	// RolloutFailed, when not empty, is the Deployment's message for a
	// rollout past its progress deadline (Progressing=False,
	// ProgressDeadlineExceeded) of its current template.
	RolloutFailed string
}

// workloadsOf returns the opted-in Deployments of each router, sorted by
// name. A Deployment without the annotation is not a workload the manager
// may touch, and is left out.
func workloadsOf(deps []appsv1.Deployment) map[string][]*Workload {
	out := map[string][]*Workload{}
	for i := range deps {
		d := &deps[i]
		router := d.Labels[v1alpha1.RouterLabel]
		if _, ok := d.Annotations[v1alpha1.PolicyVolumeAnnotation]; !ok || router == "" || d.DeletionTimestamp != nil {
			continue
		}
		out[router] = append(out[router], ReadWorkload(d))
	}
	for _, ws := range out {
		slices.SortFunc(ws, func(a, b *Workload) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

// ReadWorkload reads what an opted-in Deployment's pod template says about
// its router: which volume and container, the router mode and whether the
// container reads the mounted policy file.
func ReadWorkload(d *appsv1.Deployment) *Workload {
	w := &Workload{Name: d.Name, UID: d.UID, Volume: d.Annotations[v1alpha1.PolicyVolumeAnnotation], Replicas: 1}
	if d.Spec.Replicas != nil {
		w.Replicas = *d.Spec.Replicas
	}
	w.RolloutFailed = rolloutFailure(d)
	where := fmt.Sprintf("Deployment %s", d.Name)
	spec := &d.Spec.Template.Spec

	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == w.Volume {
			vol = &spec.Volumes[i]
		}
	}
	w.Mode, w.ModeOrigin = DefaultRouterMode, fmt.Sprintf("the default router mode (no %s nor %s in %s)", RouterModeFlag, RouterModeEnv, where)
	switch {
	case vol == nil:
		w.NotRead = fmt.Sprintf("%s: annotation %s names volume %q, but the pod template has no volume of that name", where, v1alpha1.PolicyVolumeAnnotation, w.Volume)
		return w
	case vol.ConfigMap == nil:
		w.NotRead = fmt.Sprintf("%s: volume %q is not a configMap volume; the manager points only a configMap volume at the compiled config", where, w.Volume)
		return w
	}
	w.Writable, w.References = true, vol.ConfigMap.Name

	var c *corev1.Container
	var mount *corev1.VolumeMount
	for i := range spec.Containers {
		for j := range spec.Containers[i].VolumeMounts {
			if m := &spec.Containers[i].VolumeMounts[j]; m.Name == w.Volume && c == nil {
				c, mount = &spec.Containers[i], m
			}
		}
	}
	if c == nil {
		w.NotRead = fmt.Sprintf("%s: no container mounts volume %q", where, w.Volume)
		return w
	}
	w.Container = c.Name
	where = fmt.Sprintf("container %q of Deployment %s", c.Name, d.Name)
	w.ModeOrigin = fmt.Sprintf("the default router mode (no %s nor %s in %s)", RouterModeFlag, RouterModeEnv, where)

	if v, from, ok := setting(c, RouterModeFlag, RouterModeEnv); ok {
		w.Mode, w.ModeOrigin = hintsconfig.RouterMode(v), fmt.Sprintf("%s of %s", from, where)
	}
	file, ok := policyFile(vol, mount)
	if !ok {
		w.NotRead = fmt.Sprintf("%s: volume %q does not hold %s (its items leave that key out)", where, w.Volume, v1alpha1.HintsConfigKey)
		return w
	}
	got, from, ok := setting(c, RouterPolicyConfigFlag, RouterPolicyConfigEnv)
	switch {
	case !ok:
		w.NotRead = fmt.Sprintf("%s sets neither %s nor %s: the router starts without a policy file; set %s %s", where, RouterPolicyConfigFlag, RouterPolicyConfigEnv, RouterPolicyConfigFlag, file)
	case path.Clean(got) != file:
		w.NotRead = fmt.Sprintf("%s: %s is %q, but the policy file is mounted at %s (volume %q); set %s %s", where, from, got, file, w.Volume, RouterPolicyConfigFlag, file)
	}
	return w
}

// policyFile is the path at which a container that mounts a configMap
// volume sees the policy file, and false when the volume does not carry
// it.
func policyFile(vol *corev1.Volume, m *corev1.VolumeMount) (string, bool) {
	name := v1alpha1.HintsConfigKey
	if items := vol.ConfigMap.Items; len(items) > 0 {
		i := slices.IndexFunc(items, func(k corev1.KeyToPath) bool { return k.Key == v1alpha1.HintsConfigKey })
		if i < 0 {
			return "", false
		}
		name = items[i].Path
	}
	if m.SubPath != "" {
		// The mount is one file (or folder) of the volume.
		if path.Clean(m.SubPath) == path.Clean(name) {
			return path.Clean(m.MountPath), true
		}
		rel, ok := strings.CutPrefix(path.Clean(name), path.Clean(m.SubPath)+"/")
		return path.Join(m.MountPath, rel), ok
	}
	return path.Join(m.MountPath, name), true
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
