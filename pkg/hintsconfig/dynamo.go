package hintsconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// The rules of this file are those of a released Dynamo Frontend's own
// parse of its policy file, read from its sources (lib/kv-router:
// scheduling/policy_config.rs for the root, the profiles and the router
// settings; scheduling/worker_selection_config.rs; plugins/kv_hint/
// config.rs), with Dynamo's words where it has them. They apply to
// TargetDynamo only.

// parseDynamo reads a policy file as a released Dynamo Frontend does.
func parseDynamo(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, Problems{configProblem("", fmt.Sprintf("file is %d bytes, over the %d-byte limit", len(data), MaxConfigBytes))}
	}
	js, src, probs := readYAML12(data)
	if len(probs) > 0 {
		return nil, probs
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		p := configProblem("", "the document must be a mapping: a Dynamo router policy file (router policy config must define router settings, a root profile, at least one model profile, worker_selection, request_classifier, or kv_hint_policy)")
		return nil, Problems{p}
	}
	d := dynamoReader{src: src}
	top = d.root(top)
	if len(d.probs) > 0 {
		src.locate(d.probs)
		return nil, d.probs
	}
	js, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfigJSON(js, FormRouterWideHint)
	if probs, ok := err.(Problems); ok {
		src.locate(probs)
		return nil, probs
	}
	if err != nil {
		return nil, err
	}
	for role, e := range cfg.WorkerSelection {
		for i, inst := range cfg.Instances {
			if e.Instance != "" && inst.Name == e.Instance {
				if src.instanceOf == nil {
					src.instanceOf = map[string]string{}
				}
				src.instanceOf[role] = "worker_selection/instances/" + strconv.Itoa(i)
			}
		}
	}
	cfg.source = src
	cfg.readReleased = true
	cfg.Target = TargetDynamo
	return cfg, nil
}

// dynamoReader checks the root of a policy file with Dynamo's rules.
type dynamoReader struct {
	src   *source
	probs Problems
}

// fail records a problem at a path ("policy_classes/0/quantum").
func (d *dynamoReader) fail(path string, format string, args ...any) {
	p := configProblem("", fmt.Sprintf(format, args...))
	for q := path; q != ""; {
		if l, ok := d.src.lines[q]; ok {
			p.Line = l
			break
		}
		i := strings.LastIndexByte(q, '/')
		if i < 0 {
			break
		}
		q = q[:i]
	}
	d.probs = append(d.probs, p)
}

// root checks the root keys Dynamo reads and kvhint does not run (the
// profiles, the router settings, the request classifier), drops what null
// leaves unset, and returns the rest for the released-form parse.
func (d *dynamoReader) root(top map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range top {
		// Every root key is an Option (or a defaulted map): null leaves
		// it unset.
		if !isNull(v) {
			out[k] = v
		}
	}
	if ws, ok := out["worker_selection"]; ok {
		out["worker_selection"] = dropNullRoles(ws)
	}
	// The root profile: all of its three keys, or none.
	n, at := 0, ""
	for _, k := range []string{"default_policy_family", "uncached_isl_buckets", "policy_classes"} {
		if _, ok := out[k]; ok {
			n, at = n+1, k
		}
	}
	switch {
	case n == 3:
		d.profile("", "root", out)
	case n > 0:
		d.fail(at, "root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present")
	}
	if raw, ok := out["models"]; ok {
		d.models(raw)
	}
	if raw, ok := out["router"]; ok {
		d.router(raw)
	}
	if raw, ok := out["request_classifier"]; ok {
		d.typed("request_classifier", raw)
	}
	if len(out) == 0 {
		d.fail("", "router policy config must define router settings, a root profile, at least one model profile, worker_selection, request_classifier, or kv_hint_policy")
	}
	return out
}

// dropNullRoles leaves a role written as null unset (Option<String>).
func dropNullRoles(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	changed := false
	for k, v := range m {
		// A role, and the list of instances, left unset.
		if isNull(v) {
			delete(m, k)
			changed = true
		}
	}
	if !changed {
		return raw
	}
	js, _ := json.Marshal(m)
	return js
}

func (d *dynamoReader) models(raw json.RawMessage) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		d.fail("models", "models: %s", serdeType(raw, "a map"))
		return
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if name == "" {
			d.fail("models", "model profile name must not be empty")
			continue
		}
		var prof map[string]json.RawMessage
		if err := json.Unmarshal(m[name], &prof); err != nil || prof == nil {
			d.fail("models/"+name, "models.%s: %s", name, serdeType(m[name], "struct RawPolicyProfile"))
			continue
		}
		loc := fmt.Sprintf("model %q", name)
		ok := true
		for _, k := range slices.Sorted(maps.Keys(prof)) {
			switch k {
			case "default_policy_family", "uncached_isl_buckets", "policy_classes":
			default:
				d.fail("models/"+name+"/"+k, "models.%s: unknown field `%s`, expected one of `default_policy_family`, `policy_classes`, `uncached_isl_buckets`", name, k)
				ok = false
			}
		}
		for _, k := range []string{"default_policy_family", "policy_classes", "uncached_isl_buckets"} {
			if v, has := prof[k]; !has || isNull(v) {
				d.fail("models/"+name, "models.%s: missing field `%s` (a model profile is a full profile)", name, k)
				ok = false
			}
		}
		if ok {
			d.profile("models/"+name+"/", loc, prof)
		}
	}
}

// profile checks a full profile (resolve_profile) at prefix ("" or
// "models/NAME/"), location naming it in Dynamo's words ("root", `model
// "x"`).
func (d *dynamoReader) profile(prefix, location string, prof map[string]json.RawMessage) {
	var family string
	if err := json.Unmarshal(prof["default_policy_family"], &family); err != nil {
		d.fail(prefix+"default_policy_family", "%sdefault_policy_family: %s", prefix, serdeType(prof["default_policy_family"], "a string"))
		return
	}
	if !identifierRe.MatchString(family) {
		d.fail(prefix+"default_policy_family", "%s policy family name %q must match [A-Za-z0-9_.-]+", location, family)
		return
	}
	bucketIdx, ok := d.buckets(prefix, location, prof["uncached_isl_buckets"])
	if !ok {
		return
	}
	var classes []json.RawMessage
	if err := json.Unmarshal(prof["policy_classes"], &classes); err != nil {
		d.fail(prefix+"policy_classes", "%spolicy_classes: %s", prefix, serdeType(prof["policy_classes"], "a sequence"))
		return
	}
	if len(classes) == 0 {
		d.fail(prefix+"policy_classes", "%s policy_classes must not be empty", location)
		return
	}
	names := map[string]bool{}
	families := map[string]bool{}
	var familyOrder []string
	explicit := []string{}
	cover := map[[2]string]bool{}
	for i, raw := range classes {
		c, ok := d.class(fmt.Sprintf("%spolicy_classes/%d", prefix, i), location, raw, bucketIdx)
		if !ok {
			return
		}
		if names[c.name] {
			d.fail(fmt.Sprintf("%spolicy_classes/%d/name", prefix, i), "%s contains duplicate policy class %q", location, c.name)
			return
		}
		names[c.name] = true
		if c.family == "" {
			explicit = append(explicit, c.name)
			continue
		}
		if !families[c.family] {
			families[c.family] = true
			familyOrder = append(familyOrder, c.family)
		}
		pair := [2]string{c.family, c.bucket}
		if cover[pair] {
			d.fail(fmt.Sprintf("%spolicy_classes/%d", prefix, i), "%s contains duplicate policy classes for family %q and bucket %q", location, c.family, c.bucket)
			return
		}
		cover[pair] = true
	}
	if !families[family] {
		d.fail(prefix+"default_policy_family", "%s default_policy_family %q does not name a configured family", location, family)
		return
	}
	for _, name := range explicit {
		if families[name] {
			d.fail(prefix+"policy_classes", "%s explicit policy class %q collides with a policy family", location, name)
			return
		}
	}
	bucketNames := make([]string, len(bucketIdx))
	for name, i := range bucketIdx {
		bucketNames[i] = name
	}
	for _, f := range familyOrder {
		for _, b := range bucketNames {
			if !cover[[2]string{f, b}] {
				d.fail(prefix+"policy_classes", "%s is missing a policy class for family %q and bucket %q", location, f, b)
				return
			}
		}
	}
}

// buckets checks uncached_isl_buckets and returns each bucket's index by
// name.
func (d *dynamoReader) buckets(prefix, location string, raw json.RawMessage) (map[string]int, bool) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		d.fail(prefix+"uncached_isl_buckets", "%suncached_isl_buckets: %s", prefix, serdeType(raw, "a sequence"))
		return nil, false
	}
	if len(items) == 0 {
		d.fail(prefix+"uncached_isl_buckets", "%s uncached_isl_buckets must not be empty", location)
		return nil, false
	}
	type bucket struct {
		min  uint64
		name string
	}
	bs := make([]bucket, len(items))
	for i, item := range items {
		at := fmt.Sprintf("%suncached_isl_buckets/%d", prefix, i)
		fields, ok := d.strictFields(at, item, "struct RawUncachedIslBucket", []string{"bucket", "min_tokens"}, []string{"bucket", "min_tokens"})
		if !ok {
			return nil, false
		}
		if msg := rustUint(fields["min_tokens"], "usize"); msg != "" {
			d.fail(at+"/min_tokens", "%s.min_tokens: %s", dotted(strings.Split(at, "/")), msg)
			return nil, false
		}
		bs[i].min, _ = strconv.ParseUint(string(fields["min_tokens"]), 10, 64)
		if err := json.Unmarshal(fields["bucket"], &bs[i].name); err != nil {
			d.fail(at+"/bucket", "%s.bucket: %s", dotted(strings.Split(at, "/")), serdeType(fields["bucket"], "a string"))
			return nil, false
		}
	}
	if bs[0].min != 0 {
		d.fail(prefix+"uncached_isl_buckets/0/min_tokens", "%s uncached_isl_buckets must start at min_tokens 0", location)
		return nil, false
	}
	for i := 1; i < len(bs); i++ {
		if bs[i].min <= bs[i-1].min {
			d.fail(fmt.Sprintf("%suncached_isl_buckets/%d/min_tokens", prefix, i), "%s uncached_isl_buckets min_tokens must be strictly increasing", location)
			return nil, false
		}
	}
	idx := map[string]int{}
	for i, b := range bs {
		if !identifierRe.MatchString(b.name) {
			d.fail(fmt.Sprintf("%suncached_isl_buckets/%d/bucket", prefix, i), "%s cache bucket name %q must match [A-Za-z0-9_.-]+", location, b.name)
			return nil, false
		}
		if _, dup := idx[b.name]; dup {
			d.fail(fmt.Sprintf("%suncached_isl_buckets/%d/bucket", prefix, i), "%s contains duplicate cache bucket %q", location, b.name)
			return nil, false
		}
		idx[b.name] = i
	}
	return idx, true
}

// policyClassFields are the keys of a policy class and their Rust types
// (RawPolicyClassConfig).
var policyClassFields = map[string]string{
	"name": "String", "policy_family": "Option<String>", "cache_bucket": "Option<String>",
	"queue_policy": "RouterQueuePolicy", "quantum": "usize",
	"prefill_busy_threshold": "Option<usize>", "prefill_busy_threshold_frac": "Option<f64>",
	"busy_worker_ratio": "Option<f64>", "request_queue_limit_per_worker": "Option<usize>",
	"raw_isl_token_queue_limit_per_worker": "Option<usize>", "cached_token_queue_limit_per_worker": "Option<usize>",
}

type policyClass struct{ name, family, bucket string }

// class checks one policy class (resolve_policy_class).
func (d *dynamoReader) class(at, location string, raw json.RawMessage, buckets map[string]int) (policyClass, bool) {
	var c policyClass
	fields, ok := d.strictFields(at, raw, "struct RawPolicyClassConfig", slices.Sorted(maps.Keys(policyClassFields)), []string{"name", "quantum"})
	if !ok {
		return c, false
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if msg := rustValue(fields[k], policyClassFields[k]); msg != "" {
			d.fail(at+"/"+k, "%s.%s: %s", dotted(strings.Split(at, "/")), k, msg)
			return c, false
		}
	}
	_ = json.Unmarshal(fields["name"], &c.name)
	if !identifierRe.MatchString(c.name) {
		d.fail(at+"/name", "%s policy class name %q must match [A-Za-z0-9_.-]+", location, c.name)
		return c, false
	}
	if string(fields["quantum"]) == "0" {
		d.fail(at+"/quantum", "%s policy class %q quantum must be greater than zero", location, c.name)
		return c, false
	}
	if q, ok := fields["queue_policy"]; ok && string(q) == `"lcfs"` {
		d.fail(at+"/queue_policy", "%s policy class %q queue_policy must be fcfs or wspt", location, c.name)
		return c, false
	}
	if f, ok := optFloat(fields["prefill_busy_threshold_frac"]); ok && f < 0 {
		d.fail(at+"/prefill_busy_threshold_frac", "%s policy class %q prefill_busy_threshold_frac must be finite and non-negative", location, c.name)
		return c, false
	}
	ratio, hasRatio := optFloat(fields["busy_worker_ratio"])
	if hasRatio && (ratio <= 0 || ratio > 1) {
		d.fail(at+"/busy_worker_ratio", "%s policy class %q busy_worker_ratio must be a finite fraction in (0.0, 1.0]", location, c.name)
		return c, false
	}
	_, abs := optPresent(fields["prefill_busy_threshold"])
	_, frac := optFloat(fields["prefill_busy_threshold_frac"])
	if hasRatio && !abs && !frac {
		d.fail(at+"/busy_worker_ratio", "%s policy class %q sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac, so no worker can ever be considered busy", location, c.name)
		return c, false
	}
	fam, hasFam := optPresent(fields["policy_family"])
	bkt, hasBkt := optPresent(fields["cache_bucket"])
	switch {
	case !hasFam && !hasBkt:
	case hasFam && hasBkt:
		_ = json.Unmarshal(fam, &c.family)
		_ = json.Unmarshal(bkt, &c.bucket)
		if !identifierRe.MatchString(c.family) {
			d.fail(at+"/policy_family", "%s policy family name %q must match [A-Za-z0-9_.-]+", location, c.family)
			return c, false
		}
		if !identifierRe.MatchString(c.bucket) {
			d.fail(at+"/cache_bucket", "%s cache bucket name %q must match [A-Za-z0-9_.-]+", location, c.bucket)
			return c, false
		}
		if _, ok := buckets[c.bucket]; !ok {
			d.fail(at+"/cache_bucket", "%s policy class %q references unknown cache bucket %q", location, c.name, c.bucket)
			return c, false
		}
	default:
		d.fail(at, "%s policy class %q must specify both policy_family and cache_bucket or neither for an explicit class", location, c.name)
		return c, false
	}
	return c, true
}

// routerSettingTypes are the settings of the root router block: the
// fields of Dynamo's KvRouterConfig that its serde form reads, by name,
// with their Rust types (lib/kv-router/src/scheduling/config.rs,
// KvRouterConfig; fields marked serde(skip) are not settings). Any other
// key is refused.
var routerSettingTypes = map[string]string{
	"overlap_score_credit":                       "f64",
	"overlap_score_credit_decay":                 "f64",
	"prefill_load_scale":                         "f64",
	"decode_active_request_weight":               "f64",
	"host_cache_hit_weight":                      "f64",
	"disk_cache_hit_weight":                      "f64",
	"router_temperature":                         "f64",
	"use_kv_events":                              "bool",
	"router_replica_sync":                        "bool",
	"router_track_active_blocks":                 "bool",
	"router_track_output_blocks":                 "bool",
	"router_assume_kv_reuse":                     "bool",
	"router_track_prefill_tokens":                "bool",
	"router_tracking_hash":                       "String",
	"router_tracking_key_file":                   "Option<String>",
	"router_tracking_key_id":                     "Option<String>",
	"router_prefill_load_model":                  "String",
	"router_ttl_secs":                            "f64",
	"router_queue_threshold":                     "Option<f64>",
	"router_event_threads":                       "u32",
	"skip_initial_worker_wait":                   "bool",
	"router_queue_policy":                        "RouterQueuePolicy",
	"use_remote_indexer":                         "bool",
	"serve_indexer":                              "bool",
	"shared_cache_multiplier":                    "f64",
	"shared_cache_type":                          "String",
	"router_predicted_ttl_secs":                  "Option<f64>",
	"conditional_disagg_enabled":                 "bool",
	"conditional_disagg_policy":                  "String",
	"conditional_disagg_eff_isl_threshold":       "usize",
	"conditional_disagg_eff_isl_ratio_threshold": "f64",
	"conditional_disagg_prefill_busy_threshold":  "Option<f64>",
	"conditional_disagg_decode_busy_threshold":   "Option<f64>",
}

// router checks the root router block: known settings, each of its type.
func (d *dynamoReader) router(raw json.RawMessage) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		d.fail("router", "router: %s", serdeType(raw, "a map of router settings"))
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		typ, ok := routerSettingTypes[k]
		if !ok {
			d.fail("router/"+k, "router: unknown router setting %q; known: %s", k, strings.Join(slices.Sorted(maps.Keys(routerSettingTypes)), ", "))
			continue
		}
		if msg := rustValue(m[k], typ); msg != "" {
			d.fail("router/"+k, "router.%s: %s", k, msg)
		}
	}
}

// typed checks a {type, parameters} block other than kv_hint_policy
// (request_classifier): deny_unknown_fields, the type an identifier and
// not "default", parameters a mapping.
func (d *dynamoReader) typed(key string, raw json.RawMessage) {
	fields, ok := d.strictFields(key, raw, "a mapping with type and parameters", []string{"parameters", "type"}, []string{"type"})
	if !ok {
		return
	}
	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil {
		d.fail(key+"/type", "%s.type: %s", key, serdeType(fields["type"], "a string"))
		return
	}
	switch {
	case typ == defaultSelection:
		d.fail(key+"/type", "%s type 'default' is reserved; omit %s for none", key, key)
	case !identifierRe.MatchString(typ):
		d.fail(key+"/type", "%s: policy type %q is not a valid identifier", key, typ)
	}
	if p, ok := fields["parameters"]; ok && !bytes.HasPrefix(bytes.TrimSpace(p), []byte("{")) {
		d.fail(key+"/parameters", "%s parameters must be a YAML mapping", key)
	}
}

// strictFields reads a mapping with deny_unknown_fields: known keys only,
// required ones present (and not null).
func (d *dynamoReader) strictFields(at string, raw json.RawMessage, what string, known, required []string) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	where := dotted(strings.Split(at, "/"))
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		d.fail(at, "%s: %s", where, serdeType(raw, what))
		return nil, false
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(known, k) {
			d.fail(at+"/"+k, "%s: unknown field `%s`, expected one of %s", where, k, "`"+strings.Join(known, "`, `")+"`")
			return nil, false
		}
	}
	for _, k := range required {
		if v, ok := m[k]; !ok || isNull(v) {
			d.fail(at, "%s: missing field `%s`", where, k)
			return nil, false
		}
	}
	return m, true
}

// rustValue checks a JSON value (numbers as written) against a Rust type,
// and returns serde's words for a value it refuses, or "".
func rustValue(raw json.RawMessage, typ string) string {
	raw = bytes.TrimSpace(raw)
	if inner, ok := strings.CutPrefix(typ, "Option<"); ok {
		if isNull(raw) {
			return ""
		}
		typ = strings.TrimSuffix(inner, ">")
	}
	switch typ {
	case "usize", "u64", "u32":
		return rustUint(raw, typ)
	case "f64":
		if _, ok := jsonNumber(raw); ok {
			return ""
		}
		return serdeType(raw, "f64")
	case "bool":
		if string(raw) == "true" || string(raw) == "false" {
			return ""
		}
		return serdeType(raw, "a boolean")
	case "String":
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return ""
		}
		return serdeType(raw, "a string")
	case "RouterQueuePolicy":
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return serdeType(raw, "variant identifier")
		}
		if s != "fcfs" && s != "wspt" && s != "lcfs" {
			return fmt.Sprintf("unknown variant `%s`, expected one of `fcfs`, `wspt`, `lcfs`", s)
		}
		return ""
	}
	return ""
}

// rustUint checks an unsigned integer of a Rust type: refused as a float
// (1.0 included) or out of range, in serde's words.
func rustUint(raw json.RawMessage, typ string) string {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "invalid type: unit value, expected " + typ
	}
	if f, ok := jsonNumber(raw); ok && strings.ContainsAny(string(raw), ".eE") {
		return fmt.Sprintf("invalid type: floating point `%s`, expected %s", rustFloat(f), typ)
	}
	v, ok := new(big.Int).SetString(string(raw), 10)
	if !ok {
		return serdeType(raw, typ)
	}
	max := new(big.Int).SetUint64(math.MaxUint64)
	if typ == "u32" {
		max.SetUint64(math.MaxUint32)
	}
	if v.Sign() < 0 || v.Cmp(max) > 0 {
		return fmt.Sprintf("invalid value: integer `%s`, expected %s", raw, typ)
	}
	return ""
}

// rustFloat writes a float as Rust's Display does: 1.0 as 1.
func rustFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// jsonNumber reads a JSON number.
func jsonNumber(raw json.RawMessage) (float64, bool) {
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// optFloat reads an Option<f64> that is set.
func optFloat(raw json.RawMessage) (float64, bool) {
	if len(raw) == 0 || isNull(raw) {
		return 0, false
	}
	return jsonNumber(raw)
}

// optPresent reports whether an Option is set (present and not null).
func optPresent(raw json.RawMessage) (json.RawMessage, bool) {
	return raw, len(raw) > 0 && !isNull(raw)
}

// serdeType words a value of the wrong type as serde does: "invalid type:
// string \"x\", expected f64".
func serdeType(raw json.RawMessage, want string) string {
	raw = bytes.TrimSpace(raw)
	var got string
	switch {
	case len(raw) == 0 || isNull(raw):
		got = "unit value"
	case raw[0] == '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		got = fmt.Sprintf("string %q", s)
	case raw[0] == '{':
		got = "map"
	case raw[0] == '[':
		got = "sequence"
	case string(raw) == "true" || string(raw) == "false":
		got = "boolean `" + string(raw) + "`"
	case strings.ContainsAny(string(raw), ".eE"):
		f, _ := jsonNumber(raw)
		got = "floating point `" + rustFloat(f) + "`"
	default:
		got = "integer `" + string(raw) + "`"
	}
	return fmt.Sprintf("invalid type: %s, expected %s", got, want)
}
