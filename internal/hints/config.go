package hints

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxConfigBytes caps a hints YAML file; a larger one is refused unread.
const MaxConfigBytes = 1 << 20

// Config is the hints YAML: what a router runs, per role.
//
//	router_mode: kv
//	worker_selection:
//	  prefill: dynamo-default-cost-fn     # bare entry
//	  decode:
//	    type: kvcr
//	    parameters: {shared_cache_multiplier: 0.5}
//	    hints: [{type: kv-fetch}]
type Config struct {
	// RouterMode is the mode of roles that do not set their own; empty means kv.
	RouterMode RouterMode `json:"router_mode,omitempty"`
	// WorkerSelection maps role names to their entries.
	WorkerSelection map[string]*RoleEntry `json:"worker_selection"`
}

// RoleEntry is one role's worker-selection policy and the hints it runs.
type RoleEntry struct {
	// Type is the worker-selection policy type.
	Type string `json:"type"`
	// RouterMode overrides the file's router_mode for this role.
	RouterMode RouterMode `json:"router_mode,omitempty"`
	// Parameters of the worker-selection policy.
	Parameters Params `json:"parameters,omitempty"`
	// Hints: nil runs the defaults of the selection type; an empty list runs none.
	Hints *[]HintSpec `json:"hints,omitempty"`
}

// HintSpec is one hint policy instance in a role's list.
type HintSpec struct {
	// Type is the hint policy type.
	Type string `json:"type"`
	// Name tells instances of one type apart; needed only where a type repeats.
	Name string `json:"name,omitempty"`
	// Parameters of the hint policy.
	Parameters Params `json:"parameters,omitempty"`
}

// ID is how the hint is known within its role: its name, else its type.
func (h HintSpec) ID() string {
	if h.Name != "" {
		return h.Name
	}
	return h.Type
}

// ParseConfig reads a hints YAML document strictly: unknown keys at any
// level, duplicate keys and wrong types are errors. Structural errors of
// several roles are all returned, as Problems with ReasonInvalidConfig.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, Problems{configProblem("", fmt.Sprintf("file is %d bytes, over the %d-byte limit", len(data), MaxConfigBytes))}
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, Problems{configProblem("", "not valid YAML: "+err.Error())}
	}
	return ParseConfigJSON(js)
}

// ParseConfigJSON is ParseConfig for a document already in JSON.
func ParseConfigJSON(js []byte) (*Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, Problems{configProblem("", "the document must be a mapping with router_mode and worker_selection")}
	}
	cfg := &Config{WorkerSelection: map[string]*RoleEntry{}}
	var probs Problems
	for _, key := range sortedKeys(top) {
		switch key {
		case "router_mode":
			if err := json.Unmarshal(top[key], &cfg.RouterMode); err != nil {
				probs = append(probs, configProblem("", "router_mode must be a string, one of "+routerModeList()))
			}
		case "worker_selection":
			var roles map[string]json.RawMessage
			if err := json.Unmarshal(top[key], &roles); err != nil {
				probs = append(probs, configProblem("", "worker_selection must be a mapping of role names to entries"))
				continue
			}
			for _, role := range sortedKeys(roles) {
				entry, err := parseRoleEntry(roles[role])
				if err != nil {
					probs = append(probs, configProblem(role, err.Error()))
					continue
				}
				cfg.WorkerSelection[role] = entry
			}
		default:
			probs = append(probs, configProblem("", fmt.Sprintf("unknown key %q; known: router_mode, worker_selection", key)))
		}
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return cfg, nil
}

func parseRoleEntry(raw json.RawMessage) (*RoleEntry, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var typ string
		if err := json.Unmarshal(raw, &typ); err != nil {
			return nil, err
		}
		return &RoleEntry{Type: typ}, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("entry must be a worker-selection type or a mapping with type, router_mode, parameters, hints")
	}
	var e RoleEntry
	if err := strictUnmarshal(raw, &e); err != nil {
		return nil, err
	}
	if e.Hints != nil {
		for i, h := range *e.Hints {
			if h.Type == "" {
				return nil, fmt.Errorf("hints[%d]: type is required", i)
			}
		}
	}
	return &e, nil
}

// strictUnmarshal decodes one JSON value, refusing unknown fields and
// trailing data, with errors that name the offending field.
func strictUnmarshal(raw []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return describeJSONError(err)
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the entry")
	}
	return nil
}

func describeJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "value"
		}
		return fmt.Errorf("%s: got %s, want %s", field, te.Value, jsonKindName(te.Type.Kind().String()))
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return fmt.Errorf("%s", msg)
}

func jsonKindName(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "struct", "map":
		return "a mapping"
	default:
		return k
	}
}

func configProblem(role, msg string) Problem {
	return Problem{Severity: SeverityError, Reason: ReasonInvalidConfig, Role: role, Hint: NoHint, Message: msg}
}

// Marshal renders the config as YAML, deterministically (keys sorted).
func (c *Config) Marshal() ([]byte, error) {
	js, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(js)
}
