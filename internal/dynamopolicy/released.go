package dynamopolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// The released schema: the policy file a released Dynamo Frontend reads,
// modelled from Dynamo's code rather than its developer documentation.
//
//   - lib/kv-router/src/scheduling/worker_selection_config.rs:
//     RawWorkerSelectionConfig (deny_unknown_fields) with aggregated,
//     prefill, decode, encode as Option<String> and instances as a list of
//     {name, type, parameters} (deny_unknown_fields; parameters default {}
//     and must be a mapping); a role names an instance or "default".
//   - lib/kv-router/src/plugins/kv_hint/config.rs: RawKvHintPolicyConfig
//     (deny_unknown_fields), "YAML schema for one process-wide KV-hint
//     policy plugin": type, an identifier and not "default"; parameters
//     default {} and must be a mapping.
//   - lib/kv-router/src/scheduling/policy_config.rs: the root, every key
//     optional, unknown keys refused.
//
// Where the sources leave a question open the model follows Dynamo's
// tests: kv_hint/registry.rs loads a file of kv_hint_policy alone and
// expects it to resolve, so such a file is accepted here, although no
// indexed policy_config.rs shows kv_hint_policy among the root keys its
// "must define a root profile, at least one model profile, or
// worker_selection" check counts.

type releasedRoot struct {
	DefaultPolicyFamily *string                 `json:"default_policy_family"`
	PolicyClasses       *[]policyClass          `json:"policy_classes"`
	UncachedISLBuckets  *[]islBucket            `json:"uncached_isl_buckets"`
	Models              map[string]modelProfile `json:"models"`
	WorkerSelection     *releasedSelection      `json:"worker_selection"`
	RequestClassifier   *typedConfig            `json:"request_classifier"`
	KVHintPolicy        *typedConfig            `json:"kv_hint_policy"`
}

type releasedSelection struct {
	Aggregated *string    `json:"aggregated"`
	Prefill    *string    `json:"prefill"`
	Decode     *string    `json:"decode"`
	Encode     *string    `json:"encode"`
	Instances  []instance `json:"instances"`
}

// CheckReleased reads a policy file as a released Dynamo Frontend would
// and returns the first reason it would refuse it, in Dynamo's words
// where Dynamo has words for it.
func CheckReleased(doc []byte) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	var cfg releasedRoot
	if err := strict(js, &cfg); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	profile := cfg.DefaultPolicyFamily != nil || cfg.PolicyClasses != nil || cfg.UncachedISLBuckets != nil
	if profile && (cfg.DefaultPolicyFamily == nil || cfg.PolicyClasses == nil || cfg.UncachedISLBuckets == nil) {
		return errors.New("default_policy_family, policy_classes and uncached_isl_buckets go together")
	}
	if !profile && len(cfg.Models) == 0 && cfg.WorkerSelection == nil && cfg.KVHintPolicy == nil {
		return errors.New("router policy config must define a root profile, at least one model profile, or worker_selection")
	}
	if p := cfg.KVHintPolicy; p != nil {
		if !identifier.MatchString(p.Type) {
			return fmt.Errorf("kv_hint_policy: policy type %q is not a valid identifier", p.Type)
		}
		if p.Type == "default" {
			return errors.New("kv_hint_policy type 'default' is reserved; omit kv_hint_policy to disable custom hint formulation")
		}
		if !releasedMapping(p.Parameters) {
			return errors.New("kv_hint_policy parameters must be a YAML mapping")
		}
	}
	if ws := cfg.WorkerSelection; ws != nil {
		return checkReleasedSelection(ws)
	}
	return nil
}

func checkReleasedSelection(ws *releasedSelection) error {
	if len(ws.Instances) == 0 && ws.Aggregated == nil && ws.Prefill == nil && ws.Decode == nil && ws.Encode == nil {
		return errors.New("worker_selection must define an instance or an aggregated, prefill, decode, or encode selection")
	}
	names := map[string]bool{}
	for _, inst := range ws.Instances {
		if !identifier.MatchString(inst.Name) {
			return fmt.Errorf("worker_selection: instance %q is not a valid identifier", inst.Name)
		}
		if inst.Name == "default" {
			return errors.New("worker_selection instance name 'default' is reserved for Dynamo's built-in selector")
		}
		if !identifier.MatchString(inst.Type) {
			return fmt.Errorf("worker_selection: policy type %q is not a valid identifier", inst.Type)
		}
		if !releasedMapping(inst.Parameters) {
			return fmt.Errorf("worker_selection instance %q parameters must be a YAML mapping", inst.Name)
		}
		if names[inst.Name] {
			return fmt.Errorf("worker_selection contains duplicate instance %q", inst.Name)
		}
		names[inst.Name] = true
	}
	for _, r := range []struct {
		stage string
		v     *string
	}{{"aggregated", ws.Aggregated}, {"prefill", ws.Prefill}, {"decode", ws.Decode}, {"encode", ws.Encode}} {
		if r.v != nil && *r.v != "default" && !names[*r.v] {
			return fmt.Errorf("worker_selection %s %q does not name a configured instance", r.stage, *r.v)
		}
	}
	return nil
}

// releasedMapping reports whether parameters are what Dynamo takes: left
// out (it defaults them to an empty mapping) or a mapping. An explicit
// null is not a mapping to serde_yaml.
func releasedMapping(p json.RawMessage) bool {
	p = bytes.TrimSpace(p)
	return len(p) == 0 || p[0] == '{'
}
