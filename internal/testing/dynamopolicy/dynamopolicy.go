// Package dynamopolicy holds a policy file to the schema Dynamo's router
// reads it with, for tests: the root (RawRouterPolicyConfig), its profiles
// and classes, worker_selection with its four role keys and named
// instances, and the per-role form with hints that Dynamo's developer
// documentation describes. Every struct refuses unknown keys, as Dynamo's
// serde(deny_unknown_fields) does, and the checks Dynamo makes at start-up
// on the shape of the file are made here too.
//
// It is a model written apart from pkg/hintsconfig on purpose: a file
// that kvhint's own parser accepts proves little about Dynamo's.
package dynamopolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"sigs.k8s.io/yaml"
)

type rawRouterPolicyConfig struct {
	DefaultPolicyFamily *string                 `json:"default_policy_family"`
	PolicyClasses       *[]policyClass          `json:"policy_classes"`
	UncachedISLBuckets  *[]islBucket            `json:"uncached_isl_buckets"`
	Models              map[string]modelProfile `json:"models"`
	WorkerSelection     *workerSelection        `json:"worker_selection"`
	RequestClassifier   *typedConfig            `json:"request_classifier"`
	KVHintPolicy        *typedConfig            `json:"kv_hint_policy"`
}

type policyClass struct {
	Name                           string   `json:"name"`
	Quantum                        float64  `json:"quantum"`
	PolicyFamily                   *string  `json:"policy_family"`
	CacheBucket                    *string  `json:"cache_bucket"`
	QueuePolicy                    *string  `json:"queue_policy"`
	PrefillBusyThreshold           *uint64  `json:"prefill_busy_threshold"`
	PrefillBusyThresholdFrac       *float64 `json:"prefill_busy_threshold_frac"`
	BusyWorkerRatio                *float64 `json:"busy_worker_ratio"`
	RequestQueueLimitPerWorker     *uint64  `json:"request_queue_limit_per_worker"`
	RawISLTokenQueueLimitPerWorker *uint64  `json:"raw_isl_token_queue_limit_per_worker"`
	CachedTokenQueueLimitPerWorker *uint64  `json:"cached_token_queue_limit_per_worker"`
}

type islBucket struct {
	MinTokens uint64 `json:"min_tokens"`
	Bucket    string `json:"bucket"`
}

type modelProfile struct {
	DefaultPolicyFamily *string        `json:"default_policy_family"`
	PolicyClasses       *[]policyClass `json:"policy_classes"`
	UncachedISLBuckets  *[]islBucket   `json:"uncached_isl_buckets"`
}

type typedConfig struct {
	Type       string          `json:"type"`
	Parameters json.RawMessage `json:"parameters"`
}

type workerSelection struct {
	Aggregated *roleValue `json:"aggregated"`
	Prefill    *roleValue `json:"prefill"`
	Decode     *roleValue `json:"decode"`
	Encode     *roleValue `json:"encode"`
	Instances  []instance `json:"instances"`
}

type instance struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Parameters json.RawMessage `json:"parameters"`
}

// roleValue is a role's value: a bare string (an instance's name, or
// "default"), or the documented per-role mapping.
type roleValue struct {
	bare  *string
	entry *roleEntry
}

type roleEntry struct {
	Type       string          `json:"type"`
	Parameters json.RawMessage `json:"parameters"`
	Hints      *[]hintItem     `json:"hints"`
}

type hintItem struct {
	Type       string          `json:"type"`
	Name       *string         `json:"name"`
	Parameters json.RawMessage `json:"parameters"`
}

func (v *roleValue) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v.bare = &s
		return nil
	}
	v.entry = &roleEntry{}
	return strict(b, v.entry)
}

func strict(b []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

var identifier = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Check reads a policy file as Dynamo's router would and returns the first
// reason it would refuse it.
func Check(doc []byte) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	var cfg rawRouterPolicyConfig
	if err := strict(js, &cfg); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	profile := cfg.DefaultPolicyFamily != nil || cfg.PolicyClasses != nil || cfg.UncachedISLBuckets != nil
	if profile && (cfg.DefaultPolicyFamily == nil || cfg.PolicyClasses == nil || cfg.UncachedISLBuckets == nil) {
		return errors.New("default_policy_family, policy_classes and uncached_isl_buckets go together")
	}
	if !profile && len(cfg.Models) == 0 && cfg.WorkerSelection == nil {
		return errors.New("router policy config must define a root profile, at least one model profile, or worker_selection")
	}
	if cfg.KVHintPolicy != nil {
		if err := checkTyped("kv_hint_policy", *cfg.KVHintPolicy); err != nil {
			return err
		}
	}
	if ws := cfg.WorkerSelection; ws != nil {
		return checkWorkerSelection(ws)
	}
	return nil
}

func checkWorkerSelection(ws *workerSelection) error {
	names := map[string]bool{}
	for i, inst := range ws.Instances {
		switch {
		case !identifier.MatchString(inst.Name) || inst.Name == "default":
			return fmt.Errorf("worker_selection.instances[%d]: name %q is not a usable identifier", i, inst.Name)
		case names[inst.Name]:
			return fmt.Errorf("worker_selection.instances[%d]: duplicate name %q", i, inst.Name)
		}
		names[inst.Name] = true
		if err := checkTyped(fmt.Sprintf("worker_selection.instances[%d]", i), typedConfig{Type: inst.Type, Parameters: inst.Parameters}); err != nil {
			return err
		}
	}
	roles := []struct {
		name string
		v    *roleValue
	}{{"aggregated", ws.Aggregated}, {"prefill", ws.Prefill}, {"decode", ws.Decode}, {"encode", ws.Encode}}
	any := len(ws.Instances) > 0
	for _, r := range roles {
		if r.v == nil {
			continue
		}
		any = true
		if r.v.bare != nil {
			if *r.v.bare != "default" && !names[*r.v.bare] {
				return fmt.Errorf("worker_selection %s %q does not name a configured instance", r.name, *r.v.bare)
			}
			continue
		}
		e := r.v.entry
		if err := checkTyped("worker_selection."+r.name, typedConfig{Type: e.Type, Parameters: e.Parameters}); err != nil {
			return err
		}
		if e.Hints == nil {
			continue
		}
		for i, h := range *e.Hints {
			if err := checkTyped(fmt.Sprintf("worker_selection.%s.hints[%d]", r.name, i), typedConfig{Type: h.Type, Parameters: h.Parameters}); err != nil {
				return err
			}
			if h.Name != nil && !identifier.MatchString(*h.Name) {
				return fmt.Errorf("worker_selection.%s.hints[%d]: name %q is not an identifier", r.name, i, *h.Name)
			}
		}
	}
	if !any {
		return errors.New("worker_selection must define an instance or an aggregated, prefill, decode, or encode selection")
	}
	return nil
}

func checkTyped(where string, t typedConfig) error {
	if t.Type == "" {
		return fmt.Errorf("%s: type must not be empty", where)
	}
	if !identifier.MatchString(t.Type) {
		return fmt.Errorf("%s: type %q is not an identifier", where, t.Type)
	}
	p := bytes.TrimSpace(t.Parameters)
	if len(p) > 0 && !bytes.Equal(p, []byte("null")) && p[0] != '{' {
		return fmt.Errorf("%s: parameters must be a YAML mapping", where)
	}
	return nil
}
