package hintsconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
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

	// source locates problems in the YAML text the config was parsed
	// from; nil for a config built in code.
	source *source
}

// RoleEntry is one role's worker-selection policy and the hints it runs.
type RoleEntry struct {
	// Type is the worker-selection policy type.
	Type string `json:"type"`
	// RouterMode overrides the file's router_mode for this role.
	RouterMode RouterMode `json:"router_mode,omitempty"`
	// Parameters of the worker-selection policy.
	Parameters hints.Params `json:"parameters,omitempty"`
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
	Parameters hints.Params `json:"parameters,omitempty"`
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
//
// The text must hold exactly one YAML document (a second would be one
// router config silently ignored), its mapping keys must read as the
// strings written (YAML 1.1 turns a plain yes: into true:), and it must
// have worker_selection. Problems carry the line they point at; so do
// those Compile finds in the config returned.
func ParseConfig(data []byte) (*Config, error) {
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
	cfg, err := ParseConfigJSON(js)
	if probs, ok := err.(Problems); ok {
		src.restoreNonFinite(probs)
		src.locate(probs)
		return nil, probs
	}
	if err != nil {
		return nil, err
	}
	cfg.source = src
	return cfg, nil
}

// ParseConfigJSON is ParseConfig for a document already in JSON.
func ParseConfigJSON(js []byte) (*Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, Problems{configProblem("", "the document must be a mapping with router_mode and worker_selection")}
	}
	cfg := &Config{WorkerSelection: map[string]*RoleEntry{}}
	var probs Problems
	if _, ok := top["worker_selection"]; !ok {
		probs = append(probs, configProblem("", "worker_selection is required: the roles the router books workers for, each with its worker-selection policy (write worker_selection: {} for a router that runs no role)"))
	}
	for _, key := range slices.Sorted(maps.Keys(top)) {
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
			if roles == nil {
				probs = append(probs, configProblem("", "worker_selection has no value: list the roles, or write worker_selection: {} for a router that runs no role"))
				continue
			}
			for _, role := range slices.Sorted(maps.Keys(roles)) {
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
	var fields map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return nil, fmt.Errorf("entry must be a worker-selection type or a mapping with type, router_mode, parameters, hints")
	}
	e := &RoleEntry{}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		val := fields[key]
		var err error
		switch key {
		case "type":
			err = decodeField(val, &e.Type, "a string")
		case "router_mode":
			err = decodeField(val, &e.RouterMode, "a string")
		case "parameters":
			e.Parameters, err = decodeParamsField(val)
		case "hints":
			e.Hints, err = parseHintList(val)
		default:
			err = fmt.Errorf("unknown key %q; known: hints, parameters, router_mode, type", key)
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

// Marshal renders the config as YAML, deterministically (keys sorted).
func (c *Config) Marshal() ([]byte, error) {
	js, err := json.Marshal(c)
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
