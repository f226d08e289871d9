package rolegraph

import (
	"cmp"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// Input is what the compile step looks at, all from one namespace.
type Input struct {
	RouterRoles  []v1alpha1.RouterRole
	HintPolicies []v1alpha1.HintPolicy
	// ConfigMaps are the compiled ConfigMaps that exist now, known by name
	// (v1alpha1.HintsConfigMapName). They hold the entry each router runs
	// for each role, which a role whose new spec is invalid keeps.
	ConfigMaps []corev1.ConfigMap
	// Pods are router pods; their labels, annotations, deletion timestamp
	// and phase are read, and for restart-mode routers their configMap
	// volumes and Ready condition.
	Pods []corev1.Pod
	// Deployments are router Deployments (RouterLabel). Those that opt in
	// (v1alpha1.OptedIn) make their router a restart-mode
	// one; the others are only read for nothing.
	Deployments []appsv1.Deployment
	// Graphs are router DynamoGraphDeployments (RouterLabel); those that
	// opt in (v1alpha1.GraphOptedIn) make their router a restart-mode one.
	Graphs []dynamograph.Graph
	// Now stamps the conditions that change.
	Now metav1.Time
	// CatalogProblems are, by router, why the catalog the router declares
	// (see package controllers) cannot be used: every RouterRole of such a
	// router is refused with the finding, runs its last good entry (checked
	// by the catalog Compile is given, the last good one), and the router's
	// ConfigMap is left as it is (Router.Held).
	CatalogProblems map[string]Finding
	// PolicyFileForms are, by router, the policy-file form its build reads,
	// which its declared catalog says (declared.Catalog.Form). A router
	// not named, or named with the empty form, reads the form of its
	// target (RouterForm): a restart-mode router's Dynamo Frontend the
	// released hintsconfig.FormRouterWideHint, a sidecar router
	// hintsconfig.FormPerRoleHints. The router's config is written in it,
	// and roles it cannot carry are refused with PolicyFormCannotCarry.
	PolicyFileForms map[string]hintsconfig.Form
	// DeclaredCatalogs names the routers whose catalog a ConfigMap
	// declares (see package controllers): the build of such a router
	// links what its declaration lists. A restart-mode router written in
	// the released form and not named here runs a stock Dynamo build,
	// which links only Dynamo's own worker-selection types and no KV-hint
	// policy, and its roles are checked for that build
	// (hintsconfig.TargetDynamo without Config.DeclaredCatalog): a role
	// that lists hints is refused with UnknownHintType rather than
	// written into a file the Frontend would not start on.
	DeclaredCatalogs map[string]bool
	// Target, when hintsconfig.TargetDynamo, holds every router written
	// in the released form to a Dynamo Frontend's checks, sidecar routers
	// too (kvhint compile --target dynamo); when empty, each router's own
	// target decides: a restart-mode router's Frontend, else the sidecar.
	Target hintsconfig.Target
	// DynamoVersions are, by router, the Dynamo version its declared
	// catalog states (declared.Catalog.DynamoVersion), which picks the
	// dialect of its roles unless a role's own annotation does (see
	// DialectOf). A router not named reads it from its workload.
	DynamoVersions map[string]string
	// WriteRefusals are, by router, the last write of its config to one
	// of its workloads that was refused. One for the config compiled now
	// (same Hash) makes every role of the router Programmed False with
	// reason PolicyConfigNotWritten, and the router's pods are counted
	// against the config the workloads still reference, not the refused
	// one; one for another config is ignored.
	WriteRefusals map[string]WriteRefusal
	// Staged are the routers a RouterRollout stages: their pods run the
	// stable config their ConfigMap holds until a candidate is promoted.
	// A role whose entry is the same in that config as in the one
	// compiled now runs as specified there, so its router pods are
	// counted against the stable config; a role whose entry changed is
	// counted against the compiled one (the rollout's candidate).
	Staged map[string]bool
}

// WriteRefusal is a refused write of a router's config to a restart-mode
// workload: by the API server (admission, validation, a dry run's) or by
// the manager's own check of a dry run's result.
type WriteRefusal struct {
	// Hash is the config whose write was refused.
	Hash string
	// Kind and Name are the workload's.
	Kind, Name string
	// Message says what was refused and why.
	Message string
}

// Output is the compiled configs and the status of every input object.
type Output struct {
	// Routers are sorted by name.
	Routers []*Router
	// RouterRoles and HintPolicies are sorted by name.
	RouterRoles  []*RouterRoleResult
	HintPolicies []*HintPolicyResult
}

// Router is the compiled config of one router.
type Router struct {
	Name string
	// Config is the compiled policy file, the ConfigMap's hints.yaml; nil
	// while no role of the router is accepted, when the ConfigMap holds
	// only the role settings (Dynamo's router refuses a file with no
	// role).
	Config []byte
	// Compiled is the ConfigMap's data: the policy file and the role
	// settings.
	Compiled *compiled.Config
	// Hash is the content hash of the ConfigMap's data (compiled.Hash).
	Hash string
	// ConfigMap is the ConfigMap to write: its name, labels, annotations,
	// owner references and data, nothing else.
	ConfigMap *corev1.ConfigMap
	// Notes say why the existing ConfigMap was not trusted for last good
	// entries, if it was not; for the log.
	Notes []string
	// Pods is how many of the router's pods can run a config (not being
	// deleted, and not terminated), and PodsUpToDate how many of them
	// report running this one (its hash on the applied-hash annotation).
	Pods, PodsUpToDate int32
	// Workloads are the router's restart-mode Deployments and
	// DynamoGraphDeployments, sorted by kind and name; empty for a sidecar
	// router. Each gets its policy volume
	// pointed at Revision.
	Workloads []*Workload
	// Revision is the immutable ConfigMap that holds this config for the
	// workloads, named by its hash; nil for a sidecar router.
	Revision *corev1.ConfigMap
	// Conflict, when not empty, says that a ConfigMap of the router's
	// ConfigMap name exists that the manager did not create (see
	// CreatedByManager): ConfigMap must not be written, and every role of
	// the router is Programmed False with reason ConfigMapConflict.
	Conflict string
	// Held, when not empty, says that the router's declared catalog cannot
	// be used (Input.CatalogProblems): ConfigMap must not be written; the
	// router keeps what its ConfigMap holds.
	Held string
}

// RouterRoleResult is the outcome for one RouterRole.
type RouterRoleResult struct {
	Name string
	// Findings are every problem found, errors and warnings, under the
	// condition they are reported in.
	Findings Findings
	Status   v1alpha1.RouterRoleStatus
}

// Accepted reports whether the role's current spec passed.
func (r *RouterRoleResult) Accepted() bool { return len(r.Findings.Errors()) == 0 }

// HintPolicyResult is the outcome for one HintPolicy.
type HintPolicyResult struct {
	Name     string
	Findings Findings
	Status   v1alpha1.HintPolicyStatus
}

// Accepted reports whether the policy is valid on its own.
func (r *HintPolicyResult) Accepted() bool { return len(r.Findings.Errors()) == 0 }

// Router returns the compiled config of a router, or nil.
func (o *Output) Router(name string) *Router {
	i, ok := slices.BinarySearchFunc(o.Routers, name, func(r *Router, n string) int { return cmp.Compare(r.Name, n) })
	if !ok {
		return nil
	}
	return o.Routers[i]
}

// RouterRole returns the result for a RouterRole, or nil.
func (o *Output) RouterRole(name string) *RouterRoleResult {
	i, ok := slices.BinarySearchFunc(o.RouterRoles, name, func(r *RouterRoleResult, n string) int { return cmp.Compare(r.Name, n) })
	if !ok {
		return nil
	}
	return o.RouterRoles[i]
}

// HintPolicy returns the result for a HintPolicy, or nil.
func (o *Output) HintPolicy(name string) *HintPolicyResult {
	i, ok := slices.BinarySearchFunc(o.HintPolicies, name, func(r *HintPolicyResult, n string) int { return cmp.Compare(r.Name, n) })
	if !ok {
		return nil
	}
	return o.HintPolicies[i]
}

// Compile compiles the RouterRoles of a namespace, router by router. It
// never fails: every problem is a finding on the object it concerns, and a
// router's config holds the roles that pass plus, for a role whose current
// spec does not, the entry it ran before.
func Compile(cat *hints.Catalog, in Input) *Output {
	roles := sortedByName(in.RouterRoles)
	policies := newPolicyIndex(cat, in.HintPolicies)

	workloads := workloadsOf(in.Deployments, in.Graphs, in.Now.Time)
	results := make(map[string]*roleResult, len(roles))
	byRouter := map[string][]*roleResult{}
	for _, rr := range roles {
		var wl *Workload
		if ws := workloads[rr.Spec.Router]; len(ws) > 0 {
			wl = ws[0]
		}
		target := routerTarget(in, rr.Spec.Router, workloads[rr.Spec.Router])
		res := compileRole(cat, rr, policies, wl, target, in.DynamoVersions[rr.Spec.Router])
		if f, held := in.CatalogProblems[rr.Spec.Router]; held {
			// Nothing of the current spec can be checked without the
			// router's catalog: the role runs its last good entry.
			res.findings, res.compiled = Findings{f}, nil
		}
		results[rr.Name] = res
		if dnsLabel.MatchString(rr.Spec.Router) {
			byRouter[rr.Spec.Router] = append(byRouter[rr.Spec.Router], res)
		}
	}

	out := &Output{}
	placements := map[string]*placement{}
	for _, name := range sortedKeys(byRouter) {
		var held string
		if f, ok := in.CatalogProblems[name]; ok {
			held = f.Message
		}
		r, ps := compileRouter(cat, name, routerTarget(in, name, workloads[name]), byRouter[name], configMapFor(in.ConfigMaps, name), in.Pods, held, workloads[name], in.WriteRefusals[name], in.Staged[name])
		out.Routers = append(out.Routers, r)
		for _, p := range ps {
			placements[p.res.rr.Name] = p
		}
	}

	for _, rr := range roles {
		res := results[rr.Name]
		p := placements[rr.Name]
		if p == nil {
			// Not placed on any router: spec.router is not a DNS label.
			p = &placement{res: res}
		}
		out.RouterRoles = append(out.RouterRoles, &RouterRoleResult{
			Name:     rr.Name,
			Findings: res.findings,
			Status:   roleStatus(rr, p, in.Now),
		})
	}

	usedBy := map[string][]string{}
	for _, rr := range roles {
		for _, ref := range results[rr.Name].refNames() {
			usedBy[ref] = append(usedBy[ref], rr.Name)
		}
	}
	for _, hp := range sortedByName(in.HintPolicies) {
		p := policies[hp.Name]
		out.HintPolicies = append(out.HintPolicies, &HintPolicyResult{
			Name:     hp.Name,
			Findings: p.findings,
			Status:   policyStatus(hp, p.findings, usedBy[hp.Name], in.Now),
		})
	}
	return out
}

// RouterForm is the policy-file form a router's config is written in:
// declared, the form its declared catalog states, when not empty; else
// the form its target reads. A router with restart-mode workloads
// targets a Dynamo Frontend, which reads the file at start-up, and a
// released Frontend reads only hintsconfig.FormRouterWideHint (the
// per-role form is in Dynamo's developer documentation, in no released
// code); a sidecar router targets the kvhint sidecar, which reads both
// and is given the per-role form, the one that can say every role's own
// hints.
func RouterForm(declared hintsconfig.Form, workloads []*Workload) hintsconfig.Form {
	switch {
	case declared != "":
		return declared
	case len(workloads) > 0:
		return hintsconfig.FormRouterWideHint
	}
	return hintsconfig.FormPerRoleHints
}

// routerTarget is what reads router's policy file, given its
// restart-mode workloads: the form its config is written in
// (RouterForm) and, for a restart-mode router in the released form (or
// any router with Input.Target TargetDynamo), a Dynamo Frontend whose own
// start-up checks its roles are held to, with a build that links what
// its declared catalog lists, else a stock build.
func routerTarget(in Input, router string, workloads []*Workload) hintsconfig.Reader {
	rd := hintsconfig.Reader{Form: RouterForm(in.PolicyFileForms[router], workloads)}
	if (len(workloads) > 0 || in.Target == hintsconfig.TargetDynamo) && rd.Form == hintsconfig.FormRouterWideHint {
		rd.Target, rd.DeclaredCatalog = hintsconfig.TargetDynamo, in.DeclaredCatalogs[router]
	}
	return rd
}

// placement is how one RouterRole ended up in its router's config.
type placement struct {
	res *roleResult
	// winner is the RouterRole that owns the role on the router when this
	// one lost a RoleConflict; nil otherwise.
	winner *v1alpha1.RouterRole
	// runs is the role as the router's config holds it, nil when nothing
	// of the role runs; generation is the RouterRole generation it came
	// from, which is older than the current one when runs is a last good
	// entry.
	runs       *hintsconfig.Role
	generation int64
	router     *Router
	pods       podCount
}

// compileRouter builds one router's config from its RouterRoles.
func compileRouter(cat *hints.Catalog, name string, t hintsconfig.Reader, results []*roleResult, cm *corev1.ConfigMap, pods []corev1.Pod, held string, workloads []*Workload, refusal WriteRefusal, staged bool) (*Router, []*placement) {
	r := &Router{Name: name, Held: held, Workloads: workloads}
	var prev *running
	if cm != nil && !CreatedByManager(cm) {
		r.Conflict = conflictMessage(cm)
		cm = nil
	}
	if cm != nil {
		var err error
		if prev, err = readRunning(cm); err != nil {
			r.Notes = append(r.Notes, "last good entries ignored: "+err.Error())
		}
	}

	// One RouterRole owns each role: the oldest, then the first by name,
	// so the choice does not depend on the order of events.
	claims := map[string][]*roleResult{}
	for _, res := range results {
		claims[res.rr.Spec.Role] = append(claims[res.rr.Spec.Role], res)
	}
	runs := map[string]*hintsconfig.Role{}
	sources := map[string]compiled.Source{}
	selectors := map[string]*metav1.LabelSelector{}
	var wl *Workload
	if len(workloads) > 0 {
		wl = workloads[0]
	}
	// put places what a role runs in the config, or takes it out.
	put := func(p *placement, sel *metav1.LabelSelector) {
		role := p.res.rr.Spec.Role
		delete(runs, role)
		delete(sources, role)
		delete(selectors, role)
		if p.runs == nil {
			return
		}
		if sel != nil {
			selectors[role] = sel
		}
		runs[role] = p.runs
		sources[role] = compiled.Source{RouterRole: p.res.rr.Name, UID: p.res.rr.UID, Generation: p.generation}
	}
	// config writes what the roles run into the router's config, in its
	// form, through the same compile step the sidecar runs on it: what is
	// written is what routers accept, byte for byte the same for the same
	// roles.
	config := func() hintsconfig.RouterResult {
		roles := make([]*hintsconfig.Role, 0, len(runs))
		for _, role := range sortedKeys(runs) {
			roles = append(roles, runs[role])
		}
		return hintsconfig.CompileRouter(cat, hintsconfig.RouterInput{Reader: t, Roles: roles})
	}
	var placements []*placement
	for _, role := range sortedKeys(claims) {
		claimants := claims[role]
		slices.SortFunc(claimants, func(a, b *roleResult) int {
			if c := a.rr.CreationTimestamp.Compare(b.rr.CreationTimestamp.Time); c != 0 {
				return c
			}
			return cmp.Compare(a.rr.Name, b.rr.Name)
		})
		for i, res := range claimants {
			p := &placement{res: res, router: r}
			placements = append(placements, p)
			if i > 0 {
				p.winner = claimants[0].rr
				res.findings = append(Findings{conflictFinding(res.rr, p.winner)}, res.findings...)
				continue
			}
			p.runs, p.generation = res.compiled, res.rr.Generation
			sel := res.rr.Spec.WorkerSelector
			if p.runs == nil {
				// The pool goes with the entry: an invalid change keeps
				// both as they were.
				p.runs, p.generation = prev.lastGood(cat, res.rr, wl, t)
				sel = prev.selector(role)
			}
			put(p, sel)
		}
	}

	res := config()
	if res.CannotCarry != nil {
		// The roles on the KV path that run their current spec are
		// refused together (what the form cannot carry is the set, not
		// one of them) and run their last good entries, which a config
		// in this form held before.
		for _, p := range placements {
			if p.winner != nil || p.runs == nil || p.runs != p.res.compiled || p.runs.Mode != hintsconfig.ModeKV {
				continue
			}
			p.res.findings = append(p.res.findings, Finding{
				Severity: hintsconfig.SeverityError, Condition: v1alpha1.ConditionAccepted,
				Reason: v1alpha1.ReasonPolicyFormCannotCarry, Field: "spec.hints", Message: res.CannotCarry.Message,
			})
			p.res.compiled = nil
			p.runs, p.generation = prev.lastGood(cat, p.res.rr, wl, t)
			put(p, prev.selector(p.res.rr.Spec.Role))
		}
		res = config()
		if res.CannotCarry != nil && held == "" {
			// Not even the last good entries can be written in the form
			// (the declared form changed): nothing is written.
			held = res.CannotCarry.Message
			r.Held = held
		}
	}
	graph := res.Graph
	out, err := compiled.New(graph, selectors)
	var data map[string]string
	var hash string
	if err == nil {
		data, hash, err = out.Data()
	}
	if err != nil {
		// compileRole refuses entries that do not marshal, so this is a
		// broken plugin at worst: run nothing rather than half a config.
		r.Notes = append(r.Notes, "encoding the compiled config: "+err.Error())
		graph = hintsconfig.CompileRouter(cat, hintsconfig.RouterInput{}).Graph
		out = &compiled.Config{}
		data, hash, _ = out.Data()
	}
	r.Config, r.Compiled, r.Hash = out.Policy, out, hash
	for _, w := range workloads {
		w.checkOverrides(r.Config)
	}
	if held != "" && cm != nil {
		// Nothing is written: routers run what the ConfigMap holds.
		hash = cm.Annotations[v1alpha1.HashAnnotation]
	}
	count := countPods(pods, name, hash)
	r.Pods, r.PodsUpToDate = count.total, count.upToDate
	if len(workloads) > 0 {
		runs := hash
		if refusal.Hash != "" && refusal.Hash == hash && held == "" {
			// The config could not be written: the pods run what the
			// workloads reference, and status says that one.
			runs = referencedHash(name, workloads)
			for _, w := range workloads {
				if w.Kind == refusal.Kind && w.Name == refusal.Name {
					w.NotWritten = refusal.Message
				}
			}
		}
		count = countRestartPods(pods, name, runs, workloads)
	}
	stable, stableSources := stableConfig(cm, staged && len(workloads) == 0, hash)
	var stableCount podCount
	if stable != "" {
		stableCount = countPods(pods, name, stable)
	}
	for _, p := range placements {
		if p.runs != nil {
			// Status shows the role as the config holds it.
			p.runs, _ = graph.Role(p.res.rr.Spec.Role)
		}
		p.pods = count
		if src, ok := sources[p.res.rr.Spec.Role]; stable != "" && ok && stableSources[p.res.rr.Spec.Role] == src {
			p.pods = stableCount
		}
	}
	for role := range sources {
		if _, ok := graph.Role(role); !ok {
			delete(sources, role)
		}
	}
	r.ConfigMap = configMap(name, results, data, hash, sources)
	if len(workloads) > 0 {
		r.Revision = revisionConfigMap(r.ConfigMap, name, hash, workloads)
	}
	return r, placements
}

// configMapFor finds a router's ConfigMap by name, not by label: labels
// edited away do not make the entries it holds any less what routers run.
func configMapFor(cms []corev1.ConfigMap, router string) *corev1.ConfigMap {
	for i := range cms {
		if cms[i].Name == v1alpha1.HintsConfigMapName(router) {
			return &cms[i]
		}
	}
	return nil
}

// podCount is the router pods, against the current hash, and the hint
// policies their sidecars report ejected, by role and policy.
type podCount struct {
	total, upToDate int32
	hash            string
	// restart is true for a restart-mode router: upToDate counts Ready
	// pods that mount the config's revision.
	restart bool
	ejected map[string]map[string]*ejectedOn
}

// ejectedOn is one policy's ejection across a router's pods.
type ejectedOn struct {
	pods    int32
	reasons []string // sorted, distinct
}

// stableConfig returns, for a router a rollout stages, the hash of the
// stable config its ConfigMap holds and the sources of its entries, when
// it is not hash, the config compiled now; "" otherwise.
func stableConfig(cm *corev1.ConfigMap, staged bool, hash string) (string, map[string]compiled.Source) {
	if !staged || cm == nil {
		return "", nil
	}
	stable := cm.Annotations[v1alpha1.HashAnnotation]
	if stable == "" || stable == hash {
		return "", nil
	}
	sources, err := compiled.Sources(cm.Annotations)
	if err != nil {
		return "", nil
	}
	return stable, sources
}

// countPods counts the router's pods that can run a config: not being
// deleted, and not terminated. A pod that failed (evicted, say) stays in
// the API until it is garbage collected, reporting the hash it ran last;
// counting it would hold Programmed False for nothing.
func countPods(pods []corev1.Pod, router, hash string) podCount {
	c := podCount{hash: hash}
	for i := range pods {
		p := &pods[i]
		if !livePod(p, router) {
			continue
		}
		c.total++
		if p.Annotations[v1alpha1.AppliedHashAnnotation] == hash {
			c.upToDate++
		}
		c.addEjected(p.Annotations[v1alpha1.EjectedPoliciesAnnotation])
	}
	return c
}

// ejectReasons are the reasons a sidecar reports (dispatch.EjectReason).
var ejectReasons = []string{"overrun", "abandoned", "busy"}

// addEjected counts one pod's ejected-policies annotation: entries
// ROLE/POLICY=REASON (see wellknown.EjectedPoliciesAnnotation). Entries of
// another form, and the count of those left out, are skipped; an entry is
// counted once per pod.
func (c *podCount) addEjected(v string) {
	if v == "" {
		return
	}
	entries := strings.Split(v, ",")
	for i, e := range entries {
		if i == wellknown.MaxEjectedPoliciesReported {
			break
		}
		rolePolicy, reason, ok := strings.Cut(e, "=")
		role, policy, ok2 := strings.Cut(rolePolicy, "/")
		if !ok || !ok2 || role == "" || policy == "" || !slices.Contains(ejectReasons, reason) || slices.Contains(entries[:i], e) {
			continue
		}
		if c.ejected == nil {
			c.ejected = map[string]map[string]*ejectedOn{}
		}
		if c.ejected[role] == nil {
			c.ejected[role] = map[string]*ejectedOn{}
		}
		on := c.ejected[role][policy]
		if on == nil {
			on = &ejectedOn{}
			c.ejected[role][policy] = on
		}
		on.pods++
		if j, found := slices.BinarySearch(on.reasons, reason); !found {
			on.reasons = slices.Insert(on.reasons, j, reason)
		}
	}
}

// livePod reports whether a pod is one of the router's that can run a
// config: not being deleted, not terminated.
func livePod(p *corev1.Pod, router string) bool {
	return p.Labels[v1alpha1.RouterLabel] == router && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// sortedByName returns pointers to objs, sorted by name, so that results
// do not depend on the order objects were listed in.
func sortedByName[T any, P interface {
	*T
	GetName() string
}](objs []T) []P {
	out := make([]P, len(objs))
	for i := range objs {
		out[i] = P(&objs[i])
	}
	slices.SortFunc(out, func(a, b P) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
