// Package compiled is the format of a router's compiled ConfigMap,
// "<router>-hints": the policy file (hints.yaml, a Dynamo router policy
// file), the role settings that are not part of that file (roles.yaml:
// each role's router mode and worker pool), the content hash over both and
// the sources annotation the manager keeps last good entries with.
//
// The manager writes it, `kvhint compile` prints it and the sidecar reads
// it, all through this package: one encode, one decode. It imports the
// hints core and the Kubernetes API types, never a client.
package compiled

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// The data keys and annotations of a compiled ConfigMap.
const (
	// PolicyKey holds the policy file; absent while no role is accepted.
	PolicyKey = wellknown.HintsConfigKey
	// RolesKey holds the role settings; always present.
	RolesKey = wellknown.RolesKey
	// HashAnnotation is the content hash of both keys.
	HashAnnotation = wellknown.HashAnnotation
	// SourcesAnnotation records, per role, the RouterRole and generation
	// its entry was compiled from, as JSON. With it the manager keeps a
	// role's last accepted entry across an invalid change and a restart,
	// without any state of its own. It is the manager's business; routers
	// ignore it.
	SourcesAnnotation = "hints.kvrouter.io/sources"
	// FormKey holds the policy file's form (hintsconfig.Form) when it is
	// not the default, hintsconfig.FormPerRoleHints: a file in the
	// released form with no kv_hint_policy reads, byte for byte, like a
	// per-role file whose roles run their defaults, so the form goes with
	// it. Routers read only PolicyKey; the sidecar reads this too.
	FormKey = "policy-file-form"
)

// MaxRolesBytes caps the role settings a router reads, like the policy
// file's hintsconfig.MaxConfigBytes.
const MaxRolesBytes = hintsconfig.MaxConfigBytes

// RoleSettings are one role's settings beside the policy file.
type RoleSettings struct {
	// RouterMode is the mode the role's router books it with: Dynamo's
	// --router-mode, or the worker set's own.
	RouterMode hintsconfig.RouterMode `json:"routerMode"`
	// WorkerSelector selects the role's worker pool among the workers the
	// sidecar knows; absent, every worker is in it.
	WorkerSelector *metav1.LabelSelector `json:"workerSelector,omitempty"`
}

// Source is where one role's entry in a compiled config came from.
type Source struct {
	// RouterRole is the name of the RouterRole.
	RouterRole string `json:"routerRole"`
	// UID tells a RouterRole from an earlier one of the same name: a
	// recreated object does not inherit the entry of the one deleted.
	UID types.UID `json:"uid,omitempty"`
	// Generation is the RouterRole generation the entry was compiled from.
	Generation int64 `json:"generation"`
}

// Config is a compiled config: what the two data keys hold.
type Config struct {
	// Policy is the policy file, nil when no role runs.
	Policy []byte
	// Roles are the settings of every role the policy file holds, and of
	// no other.
	Roles map[string]RoleSettings
	// Form is the policy file's form; empty is FormPerRoleHints.
	Form hintsconfig.Form
}

// New renders a compiled graph with each role's worker selector: the
// policy file the core encodes (nil for a graph with no role, which
// Dynamo's router would refuse) and the modes the graph's roles run under.
func New(g *hintsconfig.Graph, selectors map[string]*metav1.LabelSelector) (*Config, error) {
	c := &Config{Roles: make(map[string]RoleSettings, len(g.Roles)), Form: g.Form}
	for _, r := range g.Roles {
		c.Roles[r.Name] = RoleSettings{RouterMode: r.Mode, WorkerSelector: selectors[r.Name]}
	}
	if len(g.Roles) == 0 && len(g.Unchecked) == 0 {
		return c, nil
	}
	doc, _, err := g.Encode()
	if err != nil {
		return nil, err
	}
	c.Policy = doc
	return c, nil
}

// Data returns the ConfigMap data keys and the content hash over them,
// the same bytes for the same config.
func (c *Config) Data() (map[string]string, string, error) {
	// sigs.k8s.io/yaml writes map keys sorted.
	roles, err := yaml.Marshal(c.rolesOrEmpty())
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", RolesKey, err)
	}
	data := map[string]string{RolesKey: string(roles)}
	if c.Policy != nil {
		data[PolicyKey] = string(c.Policy)
	}
	if c.Form.OrDefault() != hintsconfig.FormPerRoleHints {
		data[FormKey] = string(c.Form)
	}
	return data, Hash(data), nil
}

func (c *Config) rolesOrEmpty() map[string]RoleSettings {
	if c.Roles == nil {
		return map[string]RoleSettings{}
	}
	return c.Roles
}

// Hash is the content hash of a compiled ConfigMap's data: the first 16
// hex digits of the SHA-256 over its keys (the policy file, the role
// settings, and the form when it is there), each as name, length and
// bytes, so no two data sets share an input. Other keys are not hashed.
func Hash(data map[string]string) string {
	h := sha256.New()
	for _, k := range []string{PolicyKey, RolesKey, FormKey} {
		v, ok := data[k]
		if !ok {
			continue
		}
		h.Write([]byte(k + "\x00" + strconv.Itoa(len(v)) + "\x00"))
		h.Write([]byte(v))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Decoded is a compiled config read back and checked.
type Decoded struct {
	Config
	// Parsed is the policy file parsed; a config with no roles when
	// Policy is nil.
	Parsed *hintsconfig.Config
	// Hash is the content hash of the data read.
	Hash string
	// Selectors are the roles' worker selectors, converted; a role without
	// one is absent.
	Selectors map[string]labels.Selector
}

// Modes returns the router mode of each role.
func (d *Decoded) Modes() hintsconfig.Modes {
	m := hintsconfig.Modes{Roles: make(map[string]hintsconfig.RouterMode, len(d.Roles))}
	for role, s := range d.Roles {
		m.Roles[role] = s.RouterMode
	}
	return m
}

// ErrMalformed wraps every reason Decode refuses a compiled config.
var ErrMalformed = errors.New("malformed compiled config")

// Decode reads the data keys of a compiled ConfigMap (or the files of a
// mounted one), strictly: the role settings must parse and name exactly
// the roles of the policy file, each with a router mode and a valid
// selector. A config and its pools are one unit: anything wrong refuses
// both.
func Decode(data map[string]string) (*Decoded, error) {
	fail := func(format string, args ...any) (*Decoded, error) {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	rawRoles, ok := data[RolesKey]
	if !ok {
		return fail("no %s key (the role settings)", RolesKey)
	}
	if len(rawRoles) > MaxRolesBytes {
		return fail("%s is %d bytes, over the %d-byte limit", RolesKey, len(rawRoles), MaxRolesBytes)
	}
	d := &Decoded{Hash: Hash(data), Selectors: map[string]labels.Selector{}}
	if err := yaml.UnmarshalStrict([]byte(rawRoles), &d.Roles); err != nil {
		return fail("%s: %v", RolesKey, err)
	}
	if d.Roles == nil {
		d.Roles = map[string]RoleSettings{}
	}
	for _, role := range slices.Sorted(maps.Keys(d.Roles)) {
		s := d.Roles[role]
		if !s.RouterMode.Valid() {
			return fail("%s: role %s: routerMode %q is not one of %s", RolesKey, role, s.RouterMode, hintsconfig.RouterModeList())
		}
		if s.WorkerSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(s.WorkerSelector)
		if err != nil {
			return fail("%s: role %s: workerSelector: %v", RolesKey, role, err)
		}
		d.Selectors[role] = sel
	}
	form := hintsconfig.Form(data[FormKey])
	if _, ok := data[FormKey]; ok && (form == "" || !form.Valid()) {
		return fail("%s: %q is not one of %s, %s", FormKey, form, hintsconfig.FormPerRoleHints, hintsconfig.FormRouterWideHint)
	}
	d.Form = form.OrDefault()
	d.Parsed = &hintsconfig.Config{Form: d.Form}
	if doc, ok := data[PolicyKey]; ok {
		d.Policy = []byte(doc)
		var err error
		if d.Parsed, err = hintsconfig.ParseConfigForm(d.Policy, d.Form); err != nil {
			return fail("%s: %v", PolicyKey, err)
		}
	}
	inPolicy := slices.Sorted(maps.Keys(d.Parsed.WorkerSelection))
	inRoles := slices.Sorted(maps.Keys(d.Roles))
	if !slices.Equal(inPolicy, inRoles) {
		return fail("%s holds roles [%s] but %s has settings for [%s]; each role needs both", PolicyKey, strings.Join(inPolicy, ", "), RolesKey, strings.Join(inRoles, ", "))
	}
	return d, nil
}

// Sources reads the sources annotation.
func Sources(annotations map[string]string) (map[string]Source, error) {
	var s map[string]Source
	if err := json.Unmarshal([]byte(annotations[SourcesAnnotation]), &s); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", SourcesAnnotation, err)
	}
	return s, nil
}

// EncodeSources renders the sources annotation, keys sorted.
func EncodeSources(s map[string]Source) string {
	if s == nil {
		s = map[string]Source{}
	}
	js, err := json.Marshal(s)
	if err != nil {
		// A map of plain structs always marshals.
		return "{}"
	}
	return string(js)
}
