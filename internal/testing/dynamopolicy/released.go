package dynamopolicy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// The released schema: the policy file a released Dynamo Frontend reads,
// modelled from Dynamo's code rather than its developer documentation.
//
//   - lib/kv-router/src/scheduling/policy_config.rs: the root
//     (RawRouterPolicyConfig, deny_unknown_fields), the profiles
//     (resolve_profile, resolve_policy_class, resolve_uncached_isl_buckets)
//     and the router block (KvRouterConfig's serde fields, "unknown router
//     setting" otherwise).
//   - lib/kv-router/src/scheduling/worker_selection_config.rs:
//     RawWorkerSelectionConfig (deny_unknown_fields) with aggregated,
//     prefill, decode, encode as Option<String> and instances as a list of
//     {name, type, parameters}; a role names an instance or "default".
//   - lib/kv-router/src/plugins/kv_hint/config.rs: RawKvHintPolicyConfig,
//     {type, parameters}; the request classifier has the same shape.
//   - lib/kv-router/src/plugins/registry.rs and the Python bindings: only
//     selected instances are resolved; their type must be linked and their
//     provider parses its parameters (the stock structs of
//     lib/router-plugins/builtin); a selected custom instance needs
//     --router-mode kv.
//
// The YAML is read as serde_yaml 0.9 reads it: YAML 1.2 scalars (on, yes,
// no are strings), numbers typed as written (1.0 is a float, never an
// integer), a duplicate key an error, one document.

// node is a YAML value as serde_yaml sees it.
type node struct {
	kind  string // "map", "seq", "null", "bool", "int", "float", "str"
	str   string // str, and the text of int and float
	num   *big.Int
	f     float64
	keys  []string
	items map[string]*node
	seq   []*node
}

func (n *node) describe() string {
	switch n.kind {
	case "map":
		return "map"
	case "seq":
		return "sequence"
	case "null":
		return "unit value"
	case "bool":
		return "boolean `" + n.str + "`"
	case "int":
		return "integer `" + n.num.String() + "`"
	case "float":
		return "floating point `" + strconv.FormatFloat(n.f, 'f', -1, 64) + "`"
	}
	return fmt.Sprintf("string %q", n.str)
}

func invalidType(n *node, want string) error {
	return fmt.Errorf("invalid type: %s, expected %s", n.describe(), want)
}

func readYAML(doc []byte) (*node, error) {
	dec := yamlv3.NewDecoder(bytes.NewReader(doc))
	var docs []*yamlv3.Node
	for {
		var d yamlv3.Node
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not YAML: %w", err)
		}
		if len(d.Content) > 0 {
			docs = append(docs, &d)
		}
	}
	if len(docs) > 1 {
		return nil, errors.New("deserializing from YAML containing more than one document is not supported")
	}
	if len(docs) == 0 {
		return &node{kind: "null"}, nil
	}
	return convert(docs[0].Content[0], 0)
}

func convert(y *yamlv3.Node, depth int) (*node, error) {
	if depth > 100 {
		return nil, errors.New("recursion limit exceeded")
	}
	switch y.Kind {
	case yamlv3.AliasNode:
		return convert(y.Alias, depth+1)
	case yamlv3.MappingNode:
		n := &node{kind: "map", items: map[string]*node{}}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			if k.Kind == yamlv3.AliasNode {
				k = k.Alias
			}
			if _, dup := n.items[k.Value]; dup {
				return nil, fmt.Errorf("duplicate entry with key %q at line %d", k.Value, k.Line)
			}
			v, err := convert(y.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k.Value)
			n.items[k.Value] = v
		}
		return n, nil
	case yamlv3.SequenceNode:
		n := &node{kind: "seq"}
		for _, c := range y.Content {
			v, err := convert(c, depth+1)
			if err != nil {
				return nil, err
			}
			n.seq = append(n.seq, v)
		}
		return n, nil
	}
	switch y.ShortTag() {
	case "!!null":
		return &node{kind: "null"}, nil
	case "!!bool":
		return &node{kind: "bool", str: strings.ToLower(y.Value)}, nil
	case "!!int":
		v, ok := parseInt(y.Value)
		if !ok {
			return nil, fmt.Errorf("invalid integer %q", y.Value)
		}
		return &node{kind: "int", str: y.Value, num: v}, nil
	case "!!float":
		s := strings.NewReplacer(".inf", "inf", ".Inf", "inf", ".INF", "inf", ".nan", "nan", ".NaN", "nan", ".NAN", "nan").Replace(y.Value)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("invalid float %q", y.Value)
		}
		return &node{kind: "float", str: y.Value, f: f}, nil
	}
	return &node{kind: "str", str: y.Value}, nil
}

func parseInt(s string) (*big.Int, bool) {
	s = strings.TrimPrefix(s, "+")
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	base := 10
	if strings.HasPrefix(s, "0x") {
		base, s = 16, s[2:]
	} else if strings.HasPrefix(s, "0o") {
		base, s = 8, s[2:]
	}
	v, ok := new(big.Int).SetString(s, base)
	if ok && neg {
		v.Neg(v)
	}
	return v, ok
}

// fields reads a struct with deny_unknown_fields: a map with only known
// keys.
func fields(n *node, what string, known ...string) (map[string]*node, error) {
	if n.kind != "map" {
		return nil, invalidType(n, what)
	}
	for _, k := range n.keys {
		if len(known) == 0 {
			return nil, fmt.Errorf("unknown field `%s`, there are no fields", k)
		}
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("unknown field `%s`, expected one of `%s`", k, strings.Join(known, "`, `"))
		}
	}
	return n.items, nil
}

// set reports whether an Option field is set: present and not null.
func set(m map[string]*node, k string) (*node, bool) {
	n, ok := m[k]
	return n, ok && n.kind != "null"
}

func asString(n *node) (string, error) {
	if n.kind != "str" {
		return "", invalidType(n, "a string")
	}
	return n.str, nil
}

var maxU64 = new(big.Int).SetUint64(math.MaxUint64)

// asUint reads an unsigned integer of a Rust type (usize, u64, u32).
func asUint(n *node, typ string) (*big.Int, error) {
	if n.kind != "int" {
		return nil, invalidType(n, typ)
	}
	max := maxU64
	if typ == "u32" {
		max = big.NewInt(math.MaxUint32)
	}
	if n.num.Sign() < 0 || n.num.Cmp(max) > 0 {
		return nil, fmt.Errorf("invalid value: integer `%s`, expected %s", n.num, typ)
	}
	return n.num, nil
}

func asFloat(n *node) (float64, error) {
	switch n.kind {
	case "float":
		return n.f, nil
	case "int":
		f, _ := new(big.Float).SetInt(n.num).Float64()
		return f, nil
	}
	return 0, invalidType(n, "f64")
}

func validIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// CheckReleased reads a policy file as a released Dynamo Frontend parses
// it (policy_config.rs and what it calls) and returns the first reason it
// would refuse it, in Dynamo's words where Dynamo has words for it. The
// start-up checks that need the build (linked types, the providers'
// parameters, the router mode) are CheckFrontend's.
func CheckReleased(doc []byte) error {
	_, err := parseReleased(doc)
	return err
}

// released is a parsed file: what start-up needs of it.
type released struct {
	roles      map[string]string // role -> instance name or default
	instances  map[string]instanceOf
	hintPolicy *typed
	classifier *typed
}

type instanceOf struct {
	typ    string
	params *node
}

type typed struct {
	typ    string
	params *node
}

var rootKeys = []string{"router", "default_policy_family", "policy_classes", "uncached_isl_buckets", "models", "worker_selection", "request_classifier", "kv_hint_policy"}

func parseReleased(doc []byte) (*released, error) {
	root, err := readYAML(doc)
	if err != nil {
		return nil, err
	}
	if root.kind == "null" {
		return nil, errors.New("router policy config must define router settings, a root profile, at least one model profile, worker_selection, request_classifier, or kv_hint_policy")
	}
	m, err := fields(root, "struct RawRouterPolicyConfig", rootKeys...)
	if err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	out := &released{roles: map[string]string{}, instances: map[string]instanceOf{}}
	defined := false
	if r, ok := set(m, "router"); ok {
		if err := checkRouter(r); err != nil {
			return nil, err
		}
		defined = true
	}
	_, f := set(m, "default_policy_family")
	_, c := set(m, "policy_classes")
	_, b := set(m, "uncached_isl_buckets")
	switch {
	case f && c && b:
		if err := checkProfile(m, "root"); err != nil {
			return nil, err
		}
		defined = true
	case f || c || b:
		return nil, errors.New("root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present")
	}
	if models, ok := set(m, "models"); ok {
		if models.kind != "map" {
			return nil, fmt.Errorf("models: %w", invalidType(models, "a map"))
		}
		for _, name := range models.keys {
			if name == "" {
				return nil, errors.New("model profile name must not be empty")
			}
			p, err := fields(models.items[name], "struct RawPolicyProfile", "default_policy_family", "policy_classes", "uncached_isl_buckets")
			if err != nil {
				return nil, fmt.Errorf("models.%s: %w", name, err)
			}
			for _, k := range []string{"default_policy_family", "policy_classes", "uncached_isl_buckets"} {
				if _, ok := set(p, k); !ok {
					return nil, fmt.Errorf("models.%s: missing field `%s`", name, k)
				}
			}
			if err := checkProfile(p, fmt.Sprintf("model %q", name)); err != nil {
				return nil, err
			}
			defined = true
		}
	}
	if ws, ok := set(m, "worker_selection"); ok {
		if err := parseSelection(ws, out); err != nil {
			return nil, err
		}
		defined = true
	}
	for _, k := range []string{"request_classifier", "kv_hint_policy"} {
		n, ok := set(m, k)
		if !ok {
			continue
		}
		t, err := parseTyped(n, k)
		if err != nil {
			return nil, err
		}
		if k == "kv_hint_policy" {
			out.hintPolicy = t
		} else {
			out.classifier = t
		}
		defined = true
	}
	if !defined {
		return nil, errors.New("router policy config must define router settings, a root profile, at least one model profile, worker_selection, request_classifier, or kv_hint_policy")
	}
	return out, nil
}

func parseTyped(n *node, key string) (*typed, error) {
	m, err := fields(n, "struct Raw"+key, "type", "parameters")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	t := &typed{}
	if tn, ok := m["type"]; ok {
		if t.typ, err = asString(tn); err != nil {
			return nil, fmt.Errorf("%s.type: %w", key, err)
		}
	}
	if !validIdentifier(t.typ) {
		return nil, fmt.Errorf("%s: policy type %q is not a valid identifier", key, t.typ)
	}
	if t.typ == "default" {
		what := "it"
		if key == "kv_hint_policy" {
			what = "custom hint formulation" // plugins/kv_hint/config.rs
		}
		return nil, fmt.Errorf("%s type 'default' is reserved; omit %s to disable %s", key, key, what)
	}
	if p, ok := m["parameters"]; ok {
		if p.kind != "map" {
			return nil, fmt.Errorf("%s parameters must be a YAML mapping", key)
		}
		t.params = p
	}
	return t, nil
}

func parseSelection(ws *node, out *released) error {
	m, err := fields(ws, "struct RawWorkerSelectionConfig", "aggregated", "prefill", "decode", "encode", "instances")
	if err != nil {
		return fmt.Errorf("worker_selection: %w", err)
	}
	if insts, ok := set(m, "instances"); ok {
		if insts.kind != "seq" {
			return fmt.Errorf("worker_selection.instances: %w", invalidType(insts, "a sequence"))
		}
		for _, item := range insts.seq {
			f, err := fields(item, "struct RawWorkerSelectionInstance", "name", "type", "parameters")
			if err != nil {
				return fmt.Errorf("worker_selection.instances: %w", err)
			}
			var name, typ string
			if n, ok := f["name"]; ok {
				if name, err = asString(n); err != nil {
					return fmt.Errorf("worker_selection.instances.name: %w", err)
				}
			}
			if n, ok := f["type"]; ok {
				if typ, err = asString(n); err != nil {
					return fmt.Errorf("worker_selection.instances.type: %w", err)
				}
			}
			switch {
			case !validIdentifier(name):
				return fmt.Errorf("worker_selection: instance %q is not a valid identifier", name)
			case name == "default":
				return errors.New("worker_selection instance name 'default' is reserved for Dynamo's built-in selector")
			case !validIdentifier(typ):
				return fmt.Errorf("worker_selection: policy type %q is not a valid identifier", typ)
			}
			params := &node{kind: "map", items: map[string]*node{}}
			if p, ok := f["parameters"]; ok {
				if p.kind != "map" {
					return fmt.Errorf("worker_selection instance %q parameters must be a YAML mapping", name)
				}
				params = p
			}
			if _, dup := out.instances[name]; dup {
				return fmt.Errorf("worker_selection contains duplicate instance %q", name)
			}
			out.instances[name] = instanceOf{typ: typ, params: params}
		}
	}
	for _, stage := range []string{"aggregated", "prefill", "decode", "encode"} {
		n, ok := set(m, stage)
		if !ok {
			continue
		}
		name, err := asString(n)
		if err != nil {
			return fmt.Errorf("worker_selection.%s: %w", stage, err)
		}
		if _, ok := out.instances[name]; name != "default" && !ok {
			return fmt.Errorf("worker_selection %s %q does not name a configured instance", stage, name)
		}
		out.roles[stage] = name
	}
	if len(out.roles) == 0 && len(out.instances) == 0 {
		return errors.New("worker_selection must define an instance or an aggregated, prefill, decode, or encode selection")
	}
	return nil
}

// routerSettings are KvRouterConfig's serde fields and their Rust types
// (lib/kv-router/src/scheduling/config.rs).
var routerSettings = map[string]string{
	"overlap_score_credit": "f64", "overlap_score_credit_decay": "f64", "prefill_load_scale": "f64",
	"decode_active_request_weight": "f64", "host_cache_hit_weight": "f64", "disk_cache_hit_weight": "f64",
	"router_temperature": "f64", "use_kv_events": "bool", "router_replica_sync": "bool",
	"router_track_active_blocks": "bool", "router_track_output_blocks": "bool", "router_assume_kv_reuse": "bool",
	"router_track_prefill_tokens": "bool", "router_tracking_hash": "str", "router_tracking_key_file": "?str",
	"router_tracking_key_id": "?str", "router_prefill_load_model": "str", "router_ttl_secs": "f64",
	"router_queue_threshold": "?f64", "router_event_threads": "u32", "skip_initial_worker_wait": "bool",
	"router_queue_policy": "queue", "use_remote_indexer": "bool", "serve_indexer": "bool",
	"shared_cache_multiplier": "f64", "shared_cache_type": "str", "router_predicted_ttl_secs": "?f64",
	"conditional_disagg_enabled": "bool", "conditional_disagg_policy": "str",
	"conditional_disagg_eff_isl_threshold": "usize", "conditional_disagg_eff_isl_ratio_threshold": "f64",
	"conditional_disagg_prefill_busy_threshold": "?f64", "conditional_disagg_decode_busy_threshold": "?f64",
}

func checkRouter(r *node) error {
	if r.kind != "map" {
		return fmt.Errorf("router: %w", invalidType(r, "a map"))
	}
	for _, k := range r.keys {
		typ, ok := routerSettings[k]
		if !ok {
			return fmt.Errorf("router: unknown router setting %q", k)
		}
		if err := checkType(r.items[k], typ); err != nil {
			return fmt.Errorf("router.%s: %w", k, err)
		}
	}
	return nil
}

func checkType(n *node, typ string) error {
	if strings.HasPrefix(typ, "?") {
		if n.kind == "null" {
			return nil
		}
		typ = typ[1:]
	}
	var err error
	switch typ {
	case "f64":
		var f float64
		if f, err = asFloat(n); err == nil && (math.IsInf(f, 0) || math.IsNaN(f)) {
			err = errors.New("must be finite")
		}
	case "bool":
		if n.kind != "bool" {
			err = invalidType(n, "a boolean")
		}
	case "str":
		_, err = asString(n)
	case "usize", "u64", "u32":
		_, err = asUint(n, typ)
	case "queue":
		if n.kind != "str" {
			return invalidType(n, "variant identifier")
		}
		if n.str != "fcfs" && n.str != "wspt" && n.str != "lcfs" {
			return fmt.Errorf("unknown variant `%s`, expected one of `fcfs`, `wspt`, `lcfs`", n.str)
		}
	}
	return err
}

var classTypes = map[string]string{
	"name": "str", "policy_family": "?str", "cache_bucket": "?str", "queue_policy": "queue", "quantum": "usize",
	"prefill_busy_threshold": "?usize", "prefill_busy_threshold_frac": "?f64raw", "busy_worker_ratio": "?f64raw",
	"request_queue_limit_per_worker": "?usize", "raw_isl_token_queue_limit_per_worker": "?usize", "cached_token_queue_limit_per_worker": "?usize",
}

// checkProfile is resolve_profile: location is "root" or `model "x"`.
func checkProfile(m map[string]*node, location string) error {
	family, err := asString(m["default_policy_family"])
	if err != nil {
		return fmt.Errorf("default_policy_family: %w", err)
	}
	if !validIdentifier(family) {
		return fmt.Errorf("%s policy family name %q must match [A-Za-z0-9_.-]+", location, family)
	}
	classes := m["policy_classes"]
	if classes.kind != "seq" {
		return fmt.Errorf("policy_classes: %w", invalidType(classes, "a sequence"))
	}
	if len(classes.seq) == 0 {
		return fmt.Errorf("%s policy_classes must not be empty", location)
	}
	buckets, order, err := checkBuckets(m["uncached_isl_buckets"], location)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	var families []string
	var explicit []string
	table := map[[2]string]bool{}
	for _, cn := range classes.seq {
		keys := make([]string, 0, len(classTypes))
		for k := range classTypes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		f, err := fields(cn, "struct RawPolicyClassConfig", keys...)
		if err != nil {
			return fmt.Errorf("policy_classes: %w", err)
		}
		for _, req := range []string{"name", "quantum"} {
			if _, ok := f[req]; !ok {
				return fmt.Errorf("policy_classes: missing field `%s`", req)
			}
		}
		for _, k := range keys {
			n, ok := f[k]
			if !ok {
				continue
			}
			t := strings.Replace(classTypes[k], "f64raw", "f64any", 1)
			if t == "?f64any" {
				if n.kind != "null" {
					if _, err := asFloat(n); err != nil {
						return fmt.Errorf("policy_classes.%s: %w", k, err)
					}
				}
				continue
			}
			if err := checkType(n, t); err != nil {
				return fmt.Errorf("policy_classes.%s: %w", k, err)
			}
		}
		name := f["name"].str
		if !validIdentifier(name) {
			return fmt.Errorf("%s policy class name %q must match [A-Za-z0-9_.-]+", location, name)
		}
		if f["quantum"].num.Sign() == 0 {
			return fmt.Errorf("%s policy class %q quantum must be greater than zero", location, name)
		}
		if q, ok := set(f, "queue_policy"); ok && q.str == "lcfs" {
			return fmt.Errorf("%s policy class %q queue_policy must be fcfs or wspt", location, name)
		}
		frac, hasFrac := set(f, "prefill_busy_threshold_frac")
		if hasFrac {
			if v, _ := asFloat(frac); math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("%s policy class %q prefill_busy_threshold_frac must be finite and non-negative", location, name)
			}
		}
		ratio, hasRatio := set(f, "busy_worker_ratio")
		if hasRatio {
			if v, _ := asFloat(ratio); math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > 1 {
				return fmt.Errorf("%s policy class %q busy_worker_ratio must be a finite fraction in (0.0, 1.0]", location, name)
			}
			if _, abs := set(f, "prefill_busy_threshold"); !abs && !hasFrac {
				return fmt.Errorf("%s policy class %q sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac, so no worker can ever be considered busy", location, name)
			}
		}
		pf, hasF := set(f, "policy_family")
		cb, hasB := set(f, "cache_bucket")
		switch {
		case hasF && hasB:
			if !validIdentifier(pf.str) {
				return fmt.Errorf("%s policy family name %q must match [A-Za-z0-9_.-]+", location, pf.str)
			}
			if !validIdentifier(cb.str) {
				return fmt.Errorf("%s cache bucket name %q must match [A-Za-z0-9_.-]+", location, cb.str)
			}
			if !buckets[cb.str] {
				return fmt.Errorf("%s policy class %q references unknown cache bucket %q", location, name, cb.str)
			}
		case hasF || hasB:
			return fmt.Errorf("%s policy class %q must specify both policy_family and cache_bucket or neither for an explicit class", location, name)
		}
		if names[name] {
			return fmt.Errorf("%s contains duplicate policy class %q", location, name)
		}
		names[name] = true
		if !hasF {
			explicit = append(explicit, name)
			continue
		}
		if !slices.Contains(families, pf.str) {
			families = append(families, pf.str)
		}
		key := [2]string{pf.str, cb.str}
		if table[key] {
			return fmt.Errorf("%s contains duplicate policy classes for family %q and bucket %q", location, pf.str, cb.str)
		}
		table[key] = true
	}
	if !slices.Contains(families, family) {
		return fmt.Errorf("%s default_policy_family %q does not name a configured family", location, family)
	}
	for _, e := range explicit {
		if slices.Contains(families, e) {
			return fmt.Errorf("%s explicit policy class %q collides with a policy family", location, e)
		}
	}
	for _, fam := range families {
		for _, b := range order {
			if !table[[2]string{fam, b}] {
				return fmt.Errorf("%s is missing a policy class for family %q and bucket %q", location, fam, b)
			}
		}
	}
	return nil
}

func checkBuckets(n *node, location string) (map[string]bool, []string, error) {
	if n.kind != "seq" {
		return nil, nil, fmt.Errorf("uncached_isl_buckets: %w", invalidType(n, "a sequence"))
	}
	if len(n.seq) == 0 {
		return nil, nil, fmt.Errorf("%s uncached_isl_buckets must not be empty", location)
	}
	var mins []*big.Int
	var names []string
	for _, b := range n.seq {
		f, err := fields(b, "struct RawUncachedIslBucket", "min_tokens", "bucket")
		if err != nil {
			return nil, nil, fmt.Errorf("uncached_isl_buckets: %w", err)
		}
		for _, req := range []string{"min_tokens", "bucket"} {
			if _, ok := f[req]; !ok {
				return nil, nil, fmt.Errorf("uncached_isl_buckets: missing field `%s`", req)
			}
		}
		v, err := asUint(f["min_tokens"], "usize")
		if err != nil {
			return nil, nil, fmt.Errorf("uncached_isl_buckets.min_tokens: %w", err)
		}
		name, err := asString(f["bucket"])
		if err != nil {
			return nil, nil, fmt.Errorf("uncached_isl_buckets.bucket: %w", err)
		}
		mins = append(mins, v)
		names = append(names, name)
	}
	if mins[0].Sign() != 0 {
		return nil, nil, fmt.Errorf("%s uncached_isl_buckets must start at min_tokens 0", location)
	}
	for i := 1; i < len(mins); i++ {
		if mins[i].Cmp(mins[i-1]) <= 0 {
			return nil, nil, fmt.Errorf("%s uncached_isl_buckets min_tokens must be strictly increasing", location)
		}
	}
	set := map[string]bool{}
	for _, name := range names {
		if !validIdentifier(name) {
			return nil, nil, fmt.Errorf("%s cache bucket name %q must match [A-Za-z0-9_.-]+", location, name)
		}
		if set[name] {
			return nil, nil, fmt.Errorf("%s contains duplicate cache bucket %q", location, name)
		}
		set[name] = true
	}
	return set, names, nil
}
