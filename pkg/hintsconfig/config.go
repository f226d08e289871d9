package hintsconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// MaxConfigBytes caps a hints YAML file; a larger one is refused unread.
const MaxConfigBytes = 1 << 20

// Config is the hints YAML: a Dynamo router policy file, the file Dynamo's
// router reads at start-up from --router-policy-config
// (DYN_ROUTER_POLICY_CONFIG), holding what a router runs per role.
//
//	worker_selection:
//	  prefill: dynamo-default-cost-fn     # bare entry: a type (or an instance's name)
//	  decode:
//	    type: kvcr
//	    parameters: {shared_cache_multiplier: 0.5}
//	    hints: [{type: kv-fetch}]
//
// The router mode is not part of the file: it is the router's
// --router-mode flag (DYN_ROUTER_MODE), or a worker set's own flags, and
// Compile takes it as Modes.
type Config struct {
	// WorkerSelection maps role names (Dynamo's worker types: aggregated,
	// prefill, decode, encode) to their entries.
	WorkerSelection map[string]*RoleEntry `json:"worker_selection"`
	// Instances are the named worker-selection instances of a hand-written
	// file (worker_selection.instances), which a bare role entry may name;
	// ParseConfig has already resolved every entry that does.
	Instances []Instance `json:"-"`
	// Form is the shape the file is written in, and the one Marshal and
	// the compiled graph write; empty is FormPerRoleHints.
	Form Form `json:"-"`
	// Target is the program the file is read for; empty is TargetSidecar.
	// Compile applies its start-up rules, and the compiled graph writes
	// the form it reads.
	Target Target `json:"-"`
	// DeclaredCatalog says, for TargetDynamo, that the catalog the config
	// is compiled against is the router's declared catalog (its build's
	// own types). Without one, a Dynamo Frontend links only Dynamo's stock
	// worker-selection types (DynamoStockSelectionTypes), so a selected
	// instance of any other type, kvcr included, is refused even when
	// kvhint links it.
	DeclaredCatalog bool `json:"-"`
	// HintPolicy is the root kv_hint_policy of a FormRouterWideHint file:
	// the one hint policy every role on the KV path runs; nil runs none.
	// Compile gives it to each role whose entry lists no hints.
	HintPolicy *HintSpec `json:"-"`
	// Unchecked are root keys Dynamo's router reads that kvhint does not
	// check (policy_classes, models, ...), as written, by key. They are
	// kept in the compiled file so that it is still the file the router
	// was given, and each is reported with ReasonNotChecked.
	Unchecked map[string]json.RawMessage `json:"-"`

	// source locates problems in the YAML text the config was parsed
	// from; nil for a config built in code.
	source *source
	// readReleased is set when the config was read from text in
	// FormRouterWideHint: compiling it writes it back as written.
	readReleased bool
}

// Instance is one named worker-selection instance of
// worker_selection.instances, Dynamo's way of naming a configured policy
// that roles share.
type Instance struct {
	Name       string
	Type       string
	Parameters hints.Params
}

// RoleEntry is one role's worker-selection policy and the hints it runs.
type RoleEntry struct {
	// Type is the worker-selection policy type.
	Type string `json:"type"`
	// Parameters of the worker-selection policy.
	Parameters hints.Params `json:"parameters,omitempty"`
	// Hints: nil runs the defaults of the selection type; an empty list runs none.
	Hints *[]HintSpec `json:"hints,omitempty"`
	// Instance is the worker_selection.instances entry a bare entry named,
	// for messages; empty otherwise.
	Instance string `json:"-"`
}

// HintSpec is one hint policy instance in a role's list.
type HintSpec struct {
	// Type is the hint policy type.
	Type string `json:"type"`
	// Name tells instances of one type apart; needed only where a type repeats.
	Name string `json:"name,omitempty"`
	// Parameters of the hint policy.
	Parameters hints.Params `json:"parameters,omitempty"`
}

// ID is how the hint is known within its role: its name, else its type.
func (h HintSpec) ID() string {
	if h.Name != "" {
		return h.Name
	}
	return h.Type
}

// Roles are the role keys of worker_selection: Dynamo's worker types. Its
// worker_selection refuses any other key.
var Roles = []string{"aggregated", "prefill", "decode", "encode"}

// IsRole reports whether name is one of Roles.
func IsRole(name string) bool { return slices.Contains(Roles, name) }

// uncheckedRootKeys are the root keys of Dynamo's router policy file that
// kvhint accepts as written without checking them for the sidecar target:
// queueing classes, per-model profiles, cache buckets, the request
// classifier and the router settings are the router's business, not the
// hints'. The dynamo target checks them as Dynamo does (dynamo.go).
var uncheckedRootKeys = []string{"default_policy_family", "models", "policy_classes", "request_classifier", "router", "uncached_isl_buckets"}

// instancesKey is the key of worker_selection that holds named instances,
// and defaultSelection the bare entry that means Dynamo's built-in selector.
const (
	instancesKey     = "instances"
	defaultSelection = "default"
	// BuiltinSelectionType is the worker-selection type that Dynamo's
	// reserved entry "default" (the router's built-in selector) stands for.
	BuiltinSelectionType = "dynamo-default-cost-fn"
)

// identifierRe is what Dynamo accepts as an instance name.
var identifierRe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ParseConfig reads a hints YAML document strictly, as Dynamo's router
// reads its policy file (serde's deny_unknown_fields): unknown keys at any
// level, duplicate keys and wrong types are errors. Structural errors of
// several roles are all returned, as Problems with ReasonInvalidConfig.
//
// The form is read from the document: a root kv_hint_policy, which only
// FormRouterWideHint has, makes it that form; any other document is read
// in FormPerRoleHints. A reader that knows the form its router's build
// reads uses ParseConfigForm.
//
// The text must hold exactly one YAML document (a second would be one
// router config silently ignored), and its mapping keys must read as the
// strings written (YAML 1.1 turns a plain yes: into true:). Problems carry
// the line they point at; so do those Compile finds in the config
// returned.
func ParseConfig(data []byte) (*Config, error) {
	return ParseConfigForm(data, "")
}

// ParseConfigForm is ParseConfig in a given form: a document that does
// not hold to it is refused, saying which form it was read in. The empty
// form reads the form from the document, as ParseConfig does.
func ParseConfigForm(data []byte, form Form) (*Config, error) {
	if !form.Valid() {
		return nil, Problems{configProblem("", fmt.Sprintf("policy-file form %q is not one of %s", form, formList()))}
	}
	if len(data) > MaxConfigBytes {
		return nil, Problems{configProblem("", fmt.Sprintf("file is %d bytes, over the %d-byte limit", len(data), MaxConfigBytes))}
	}
	text, src, probs := readSource(data)
	if len(probs) > 0 {
		return nil, probs
	}
	js, err := yaml.YAMLToJSONStrict(text)
	if err != nil {
		p := configProblem("", "not valid YAML: "+err.Error())
		if m := lineRe.FindStringSubmatch(err.Error()); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
		}
		return nil, Problems{p}
	}
	cfg, err := parseConfigJSON(src.restoreWide(js), form)
	if probs, ok := err.(Problems); ok {
		src.restoreNonFinite(probs)
		src.locate(probs)
		return nil, probs
	}
	if err != nil {
		return nil, err
	}
	for role, e := range cfg.WorkerSelection {
		if e.Instance == "" {
			continue
		}
		for i, inst := range cfg.Instances {
			if inst.Name == e.Instance {
				if src.instanceOf == nil {
					src.instanceOf = map[string]string{}
				}
				src.instanceOf[role] = "worker_selection/instances/" + strconv.Itoa(i)
			}
		}
	}
	cfg.source = src
	cfg.readReleased = cfg.Form == FormRouterWideHint
	return cfg, nil
}

// routerModeMoved says where the router mode went when it left the file
// (Dynamo's policy file has no such key, at the root or in a role entry).
const routerModeMoved = "the router mode is not part of the policy file (Dynamo's router refuses the key); " +
	"it is the router's --router-mode flag (DYN_ROUTER_MODE), RouterRole's spec.routerMode, " +
	"and --router-mode to kvhint validate, compile and sidecar --config-file"

// rootKeys lists the root keys a form accepts, for messages.
func rootKeys(form Form) string {
	keys := []string{"worker_selection"}
	if form == FormRouterWideHint {
		keys = append(keys, kvHintPolicyKey)
	}
	return strings.Join(append(keys, uncheckedRootKeys...), ", ")
}

// ParseConfigJSON is ParseConfig for a document already in JSON.
func ParseConfigJSON(js []byte) (*Config, error) {
	return parseConfigJSON(js, "")
}

// formList is the forms, for messages.
func formList() string {
	s := make([]string, len(Forms))
	for i, f := range Forms {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

func parseConfigJSON(js []byte, form Form) (*Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, Problems{configProblem("", "the document must be a mapping with worker_selection (a Dynamo router policy file)")}
	}
	if form == "" {
		form = FormPerRoleHints
		if _, ok := top[kvHintPolicyKey]; ok {
			form = FormRouterWideHint
		}
	}
	cfg := &Config{WorkerSelection: map[string]*RoleEntry{}, Form: form}
	var probs Problems
	for _, key := range slices.Sorted(maps.Keys(top)) {
		switch {
		case key == "worker_selection":
			probs = append(probs, cfg.parseWorkerSelection(top[key])...)
		case slices.Contains(uncheckedRootKeys, key):
			if cfg.Unchecked == nil {
				cfg.Unchecked = map[string]json.RawMessage{}
			}
			cfg.Unchecked[key] = top[key]
		case key == "router_mode":
			// What a file from an earlier compile has at its root.
			probs = append(probs, configProblem("", fmt.Sprintf("unknown key %q: %s", key, routerModeMoved)))
		case key == kvHintPolicyKey && form == FormRouterWideHint:
			var ps Problems
			cfg.HintPolicy, ps = parseKVHintPolicy(top[key])
			probs = append(probs, ps...)
		case key == kvHintPolicyKey:
			probs = append(probs, configProblem("", fmt.Sprintf("kv_hint_policy (one hint policy for the whole router) belongs to the %s form, but the file is read in the %s form, "+
				"which carries %s", FormRouterWideHint, form, form.carries())))
		default:
			probs = append(probs, configProblem("", fmt.Sprintf("unknown key %q; a Dynamo router policy file takes %s", key, rootKeys(form))))
		}
	}
	_, hasPolicy := top[kvHintPolicyKey]
	if _, ok := top["worker_selection"]; !ok && len(cfg.Unchecked) == 0 && !(hasPolicy && form == FormRouterWideHint) {
		probs = append(probs, configProblem("", "worker_selection is required: the roles the router books workers for, each with its worker-selection policy "+
			"(Dynamo: a router policy config must define a root profile, at least one model profile, or worker_selection)"))
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return cfg, nil
}

// parseWorkerSelection reads worker_selection: the roles, and the named
// instances bare entries may refer to.
func (cfg *Config) parseWorkerSelection(raw json.RawMessage) Problems {
	var roles map[string]json.RawMessage
	if err := json.Unmarshal(raw, &roles); err != nil {
		return Problems{configProblem("", "worker_selection must be a mapping of role names to entries")}
	}
	if roles == nil {
		return Problems{configProblem("", "worker_selection has no value: list the roles ("+strings.Join(Roles, ", ")+")")}
	}
	if len(roles) == 0 {
		return Problems{configProblem("", "worker_selection is empty; Dynamo's router refuses it (worker_selection must define an instance or an aggregated, prefill, decode, or encode selection): list a role, or leave the file out")}
	}
	var probs Problems
	instances := map[string]*Instance{}
	if rawInst, ok := roles[instancesKey]; ok {
		var ps Problems
		cfg.Instances, ps = parseInstances(rawInst, cfg.Form == FormRouterWideHint)
		probs = append(probs, ps...)
		for i := range cfg.Instances {
			instances[cfg.Instances[i].Name] = &cfg.Instances[i]
		}
	}
	for _, role := range slices.Sorted(maps.Keys(roles)) {
		if role == instancesKey {
			continue
		}
		if cfg.Form == FormRouterWideHint {
			entry, err := routerWideEntry(role, roles[role], instances)
			if err != nil {
				probs = append(probs, configProblem(role, err.Error()))
				continue
			}
			cfg.WorkerSelection[role] = entry
			continue
		}
		entry, err := parseRoleEntry(roles[role])
		if err != nil {
			probs = append(probs, configProblem(role, err.Error()))
			continue
		}
		if entry.Hints == nil && entry.Parameters == nil && entry.fromBareString {
			if inst, ok := instances[entry.Type]; ok {
				entry.Instance, entry.Type, entry.Parameters = inst.Name, inst.Type, inst.Parameters
			} else if entry.Type == defaultSelection {
				entry.Type = BuiltinSelectionType
			}
		}
		cfg.WorkerSelection[role] = &entry.RoleEntry
	}
	return probs
}

// parseInstances reads worker_selection.instances: a list of {name, type,
// parameters}, names valid identifiers, unique, never "default". strict
// refuses parameters written as null, as a released Dynamo Frontend does
// (serde_yaml reads them as a value that is not a mapping).
func parseInstances(raw json.RawMessage, strict bool) ([]Instance, Problems) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, Problems{configProblem("", fmt.Sprintf("worker_selection.instances: got %s, want a list of {name, type, parameters}", shorten(raw)))}
	}
	var probs Problems
	out := make([]Instance, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		fail := func(format string, args ...any) {
			probs = append(probs, configProblem("", fmt.Sprintf("worker_selection.instances[%d]: ", i)+fmt.Sprintf(format, args...)))
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(item, &fields); err != nil || fields == nil {
			fail("must be a mapping with name, type, parameters")
			continue
		}
		var inst Instance
		ok := true
		for _, key := range slices.Sorted(maps.Keys(fields)) {
			var err error
			switch key {
			case "name":
				err = decodeField(fields[key], &inst.Name, "a string")
			case "type":
				err = decodeField(fields[key], &inst.Type, "a string")
			case "parameters":
				if strict && isNull(fields[key]) {
					err = &fieldError{"null: parameters must be a YAML mapping (leave the key out for none)"}
					break
				}
				inst.Parameters, err = decodeParamsField(fields[key])
			default:
				err = fmt.Errorf("unknown key %q; known: name, parameters, type", key)
			}
			if err != nil {
				fail("%s: %v", key, err)
				ok = false
			}
		}
		switch {
		case !ok:
		case inst.Name == "" || inst.Type == "":
			fail("name and type are required")
		case !identifierRe.MatchString(inst.Name):
			fail("name %q must be made of letters, digits, '_', '.' and '-'", inst.Name)
		case inst.Name == defaultSelection:
			fail("name %q is reserved for the router's built-in selector", inst.Name)
		case !identifierRe.MatchString(inst.Type):
			fail("type %q must be made of letters, digits, '_', '.' and '-' (Dynamo: policy type is not a valid identifier)", inst.Type)
		case seen[inst.Name]:
			fail("name %q is already used by another instance", inst.Name)
		default:
			seen[inst.Name] = true
			out = append(out, inst)
		}
	}
	return out, probs
}

// parsedEntry is a role entry and whether it was written as a bare string
// (which may name an instance).
type parsedEntry struct {
	RoleEntry
	fromBareString bool
}

func parseRoleEntry(raw json.RawMessage) (*parsedEntry, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var typ string
		if err := json.Unmarshal(raw, &typ); err != nil {
			return nil, err
		}
		return &parsedEntry{RoleEntry: RoleEntry{Type: typ}, fromBareString: true}, nil
	}
	var fields map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return nil, fmt.Errorf("entry must be a worker-selection type or a mapping with type, parameters, hints")
	}
	e := &parsedEntry{}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		val := fields[key]
		var err error
		switch key {
		case "type":
			err = decodeField(val, &e.Type, "a string")
		case "parameters":
			e.Parameters, err = decodeParamsField(val)
		case "hints":
			e.Hints, err = parseHintList(val)
		case "router_mode":
			err = fmt.Errorf("unknown key %q: %s", key, routerModeMoved)
		default:
			err = fmt.Errorf("unknown key %q; known: hints, parameters, type", key)
		}
		if err != nil {
			var fe *fieldError
			if errors.As(err, &fe) {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			return nil, err
		}
	}
	return e, nil
}

func parseHintList(raw json.RawMessage) (*[]HintSpec, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		// "hints:" with nothing after it reads as null, which Kubernetes
		// treats as absent (the defaults) and a person may mean as none.
		return nil, &fieldError{"has no value: leave the key out to run the defaults of the worker selection, or write hints: [] to run none"}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, &fieldError{fmt.Sprintf("got %s, want a list of hint policies", shorten(raw))}
	}
	specs := make([]HintSpec, len(items))
	for i, item := range items {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(item, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("hints[%d]: must be a mapping with type, name, parameters", i)
		}
		for _, key := range slices.Sorted(maps.Keys(fields)) {
			val := fields[key]
			var err error
			switch key {
			case "type":
				err = decodeField(val, &specs[i].Type, "a string")
			case "name":
				err = decodeField(val, &specs[i].Name, "a string")
			case "parameters":
				specs[i].Parameters, err = decodeParamsField(val)
			default:
				err = fmt.Errorf("unknown key %q; known: name, parameters, type", key)
			}
			if err != nil {
				var fe *fieldError
				if errors.As(err, &fe) {
					return nil, fmt.Errorf("hints[%d].%s: %w", i, key, err)
				}
				return nil, fmt.Errorf("hints[%d]: %w", i, err)
			}
		}
		if specs[i].Type == "" {
			return nil, fmt.Errorf("hints[%d]: type is required", i)
		}
	}
	return &specs, nil
}

// fieldError is a value of the wrong shape; the caller prefixes its key.
type fieldError struct{ msg string }

func (e *fieldError) Error() string { return e.msg }

func decodeField[T ~string](raw json.RawMessage, dst *T, want string) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return &fieldError{fmt.Sprintf("got %s, want %s", shorten(raw), want)}
	}
	return nil
}

func decodeParamsField(raw json.RawMessage) (hints.Params, error) {
	raw = bytes.TrimSpace(raw)
	if bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &fieldError{fmt.Sprintf("got %s, want a mapping of parameter names to values", shorten(raw))}
	}
	return hints.Params(raw), nil
}

func configProblem(role, msg string) Problem {
	return Problem{Severity: SeverityError, Reason: ReasonInvalidConfig, Role: role, Hint: NoHint, Message: msg}
}

// Marshal renders the config as YAML, deterministically (keys sorted):
// the unchecked root keys as they were written, and worker_selection.
// Instances are not written: every entry that named one holds its type and
// parameters.
func (c *Config) Marshal() ([]byte, error) {
	root := make(map[string]any, len(c.Unchecked)+1)
	for k, v := range c.Unchecked {
		root[k] = v
	}
	if len(c.WorkerSelection) > 0 {
		root["worker_selection"] = c.WorkerSelection
	}
	js, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(js)
}

// shorten quotes at most 40 bytes of a value in an error message.
func shorten(raw json.RawMessage) string {
	if s := string(bytes.TrimSpace(raw)); len(s) <= 40 {
		return s
	} else {
		return s[:37] + "..."
	}
}
