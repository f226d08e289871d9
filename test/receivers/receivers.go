// Package receivers holds the rules of the engines that receive kvhint's
// in-band hint (KVCR's kv.fetch parser, vLLM's kv_hints, TensorRT-LLM's and
// SGLang's), written as data in rules/*.json with the source of each rule,
// and a checker driven by that data. Tests feed it the hints the sidecar,
// the Go router example and kvhint dev really send, so that a change of
// the wire format that a receiver would refuse fails a test.
//
// It is test code: the product never imports it. It imports only the
// standard library, so that modules of their own (examples/go-router) can
// use it.
package receivers

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

//go:embed rules/*.json
var ruleFiles embed.FS

// Field is one rule on a member of an object.
type Field struct {
	Name string `json:"name"`
	// Kind is string, nonempty_string, bool, list, object, enum or
	// uint64_list.
	Kind     string   `json:"kind"`
	Required bool     `json:"required"`
	NonEmpty bool     `json:"non_empty"`
	Values   []string `json:"values"`
	Source   string   `json:"source"`
}

// Envelope is the rules on the hint message itself.
type Envelope struct {
	// Versions are the protocol versions the receiver reads; OtherVersion
	// is what it does with another: warn (reads it anyway), reject,
	// ignore (drops it silently) or unsupported (its native actions are
	// answered unsupported).
	Versions      []string `json:"versions"`
	OtherVersion  string   `json:"other_version"`
	VersionSource string   `json:"version_source"`
	KeepUnknown   bool     `json:"keep_unknown"`
	Fields        []Field  `json:"fields"`
}

// Select says which action a receiver reads when it reads one type only.
type Select struct {
	Type      string `json:"type"`
	FirstOnly bool   `json:"first_only"`
	Required  bool   `json:"required"`
	Source    string `json:"source"`
}

// Payload is the rules on one action type's payload.
type Payload struct {
	Source string  `json:"source"`
	Strict bool    `json:"strict"`
	Fields []Field `json:"fields"`
}

// Receiver is one engine's rules.
type Receiver struct {
	Name         string             `json:"name"`
	Description  string             `json:"description"`
	Source       string             `json:"source"`
	Envelope     Envelope           `json:"envelope"`
	ActionFields []Field            `json:"action_fields"`
	Select       *Select            `json:"select"`
	Payloads     map[string]Payload `json:"payloads"`
	NativePrefix string             `json:"native_prefix"`
	NativeStrict bool               `json:"native_strict"`
	NativeSource string             `json:"native_source"`
	Results      []string           `json:"results"`
}

// Verdict is what a receiver makes of one hint message.
type Verdict struct {
	// Err is the receiver's refusal of the whole hint, naming the rule
	// and its source; nil when it takes the hint.
	Err error
	// Ignored is set when the receiver drops the hint without an error
	// (an unsupported version, for TensorRT-LLM).
	Ignored bool
	// Warnings are what the receiver logs and goes on.
	Warnings []string
	// Actions says, by action_id, what becomes of each action: read
	// (the receiver reads it), backend (left to the KV backend),
	// unsupported or skipped (a later action of a type read once).
	Actions map[string]string
	// Fetch is the kv.fetch KVCR reads, as it reads it.
	Fetch *Fetch
}

// ErrNoSelectedAction is a receiver's refusal of a hint that carries no
// action of the one type it reads (KVCR: no kv.fetch). kvhint sends hints
// of kv.retain or kv.evict alone by design, for the engines that read
// them; CheckAll lets this refusal pass and says so in the verdict.
var ErrNoSelectedAction = errors.New("no action of the type the receiver reads")

// Fetch is a kv.fetch as KVCR's parser reads it.
type Fetch struct {
	Mode                  string
	NoRetain              bool
	SourceControlEndpoint string
	// BlockHashes are in order, duplicates dropped.
	BlockHashes []uint64
}

// All returns every receiver's rules, by name.
func All() (map[string]*Receiver, error) {
	entries, err := ruleFiles.ReadDir("rules")
	if err != nil {
		return nil, err
	}
	out := map[string]*Receiver{}
	for _, e := range entries {
		b, err := ruleFiles.ReadFile("rules/" + e.Name())
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		r := &Receiver{}
		if err := dec.Decode(r); err != nil {
			return nil, fmt.Errorf("rules/%s: %w", e.Name(), err)
		}
		if r.Name == "" || r.Source == "" {
			return nil, fmt.Errorf("rules/%s: a receiver needs a name and a source", e.Name())
		}
		for _, f := range allFields(r) {
			if f.Source == "" {
				return nil, fmt.Errorf("rules/%s: field %s has no source", e.Name(), f.Name)
			}
		}
		out[r.Name] = r
	}
	return out, nil
}

func allFields(r *Receiver) []Field {
	fs := slices.Concat(r.Envelope.Fields, r.ActionFields)
	for _, p := range r.Payloads {
		fs = append(fs, p.Fields...)
	}
	return fs
}

// Check reads msg, a hint message as carried, the way the receiver does.
func (r *Receiver) Check(msg []byte) Verdict {
	v := Verdict{Actions: map[string]string{}}
	obj, err := decodeObject(msg)
	if err != nil {
		v.Err = fmt.Errorf("%s: the hint must be a JSON object (%s): %w", r.Name, r.Source, err)
		return v
	}
	if err := checkFields(obj, r.Envelope.Fields, "envelope"); err != nil {
		v.Err = fmt.Errorf("%s: %w", r.Name, err)
		return v
	}
	version, _ := obj["protocol_version"].(string)
	otherVersion := len(r.Envelope.Versions) > 0 && !slices.Contains(r.Envelope.Versions, version)
	if otherVersion {
		switch r.Envelope.OtherVersion {
		case "reject":
			v.Err = fmt.Errorf("%s: protocol_version %q is not %s (%s)", r.Name, version, strings.Join(r.Envelope.Versions, ", "), r.Envelope.VersionSource)
			return v
		case "ignore":
			v.Ignored = true
			return v
		case "warn":
			v.Warnings = append(v.Warnings, fmt.Sprintf("protocol_version %q is not %s (%s)", version, strings.Join(r.Envelope.Versions, ", "), r.Envelope.VersionSource))
		}
	}
	actions, _ := obj["actions"].([]any)
	selected := false
	for i, a := range actions {
		where := fmt.Sprintf("action %d", i+1)
		act, ok := a.(map[string]any)
		if !ok {
			if r.Select != nil {
				// KVCR looks at each action only for its type.
				continue
			}
			v.Err = fmt.Errorf("%s: %s is not an object", r.Name, where)
			return v
		}
		if err := checkFields(act, r.ActionFields, where); err != nil {
			v.Err = fmt.Errorf("%s: %w", r.Name, err)
			return v
		}
		id, _ := act["action_id"].(string)
		typ, _ := act["action_type"].(string)
		switch {
		case r.Select != nil && typ != r.Select.Type:
			v.Actions[id] = "skipped"
		case r.Select != nil && selected && r.Select.FirstOnly:
			v.Actions[id] = "skipped"
		case r.Select != nil:
			selected = true
			f, err := r.readFetch(act, where)
			if err != nil {
				v.Err = fmt.Errorf("%s: %w", r.Name, err)
				return v
			}
			v.Fetch, v.Actions[id] = f, "read"
		case r.NativePrefix != "" && strings.HasPrefix(typ, r.NativePrefix):
			if otherVersion {
				v.Actions[id] = "unsupported"
				continue
			}
			if p, ok := r.Payloads[typ]; ok {
				if err := checkPayload(act["payload"], p, where); err != nil {
					v.Err = fmt.Errorf("%s: %w", r.Name, err)
					return v
				}
			}
			v.Actions[id] = "read"
		case r.NativePrefix != "":
			v.Actions[id] = "backend"
		default:
			v.Actions[id] = "read"
		}
	}
	if r.Select != nil && r.Select.Required && !selected {
		v.Err = fmt.Errorf("%s: %w: no %s action (%s)", r.Name, ErrNoSelectedAction, r.Select.Type, r.Select.Source)
	}
	return v
}

// readFetch reads the selected action's payload under the receiver's
// rules for its type.
func (r *Receiver) readFetch(act map[string]any, where string) (*Fetch, error) {
	p := r.Payloads[r.Select.Type]
	if err := checkPayload(act["payload"], p, where); err != nil {
		return nil, err
	}
	pl := act["payload"].(map[string]any)
	f := &Fetch{Mode: "copy"}
	if m, ok := pl["mode"].(string); ok {
		f.Mode = m
	}
	f.NoRetain, _ = pl["no_retain"].(bool)
	f.SourceControlEndpoint, _ = pl["source_control_endpoint"].(string)
	seen := map[uint64]bool{}
	for _, h := range pl["block_hashes"].([]any) {
		n, _ := strconv.ParseUint(string(h.(json.Number)), 10, 64)
		if !seen[n] {
			seen[n] = true
			f.BlockHashes = append(f.BlockHashes, n)
		}
	}
	return f, nil
}

func checkPayload(raw any, p Payload, where string) error {
	pl, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: payload must be an object (%s)", where, p.Source)
	}
	if err := checkFields(pl, p.Fields, where+" payload"); err != nil {
		return err
	}
	if p.Strict {
		for k := range pl {
			if !slices.ContainsFunc(p.Fields, func(f Field) bool { return f.Name == k }) {
				return fmt.Errorf("%s payload: unknown field %q (%s)", where, k, p.Source)
			}
		}
	}
	return nil
}

// checkFields holds obj to the fields' rules.
func checkFields(obj map[string]any, fields []Field, where string) error {
	for _, f := range fields {
		val, present := obj[f.Name]
		if !present || val == nil {
			if f.Required {
				return fmt.Errorf("%s: %s is required (%s)", where, f.Name, f.Source)
			}
			continue
		}
		if err := checkKind(val, f); err != nil {
			return fmt.Errorf("%s: %s %v (%s)", where, f.Name, err, f.Source)
		}
	}
	return nil
}

func checkKind(val any, f Field) error {
	switch f.Kind {
	case "string":
		if _, ok := val.(string); !ok {
			return fmt.Errorf("must be a string")
		}
	case "nonempty_string":
		if s, ok := val.(string); !ok || s == "" {
			return fmt.Errorf("must be a non-empty string")
		}
	case "bool":
		if _, ok := val.(bool); !ok {
			return fmt.Errorf("must be a bool")
		}
	case "object":
		if _, ok := val.(map[string]any); !ok {
			return fmt.Errorf("must be an object")
		}
	case "list":
		if _, ok := val.([]any); !ok {
			return fmt.Errorf("must be a list")
		}
	case "enum":
		if s, ok := val.(string); !ok || !slices.Contains(f.Values, s) {
			return fmt.Errorf("must be one of %s", strings.Join(f.Values, ", "))
		}
	case "uint64_list":
		l, ok := val.([]any)
		if !ok || (f.NonEmpty && len(l) == 0) {
			return fmt.Errorf("must be a non-empty list of integers in [0, 2^64)")
		}
		for i, e := range l {
			n, ok := e.(json.Number) // a bool is no json.Number
			if !ok {
				return fmt.Errorf("[%d] is not an integer", i)
			}
			if _, err := strconv.ParseUint(string(n), 10, 64); err != nil {
				return fmt.Errorf("[%d] = %s is not an integer in [0, 2^64)", i, n)
			}
		}
	default:
		return fmt.Errorf("has a rule of unknown kind %q", f.Kind)
	}
	return nil
}

func decodeObject(msg []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, fmt.Errorf("null")
	}
	return obj, nil
}

// CheckAll checks msg against every receiver and returns an error naming
// each receiver that refuses or ignores it, or warns about it; a refusal
// for want of the one action type a receiver reads (ErrNoSelectedAction)
// is left in the verdict and not counted.
func CheckAll(msg []byte) (map[string]Verdict, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	out := map[string]Verdict{}
	var bad []string
	for name, r := range all {
		v := r.Check(msg)
		out[name] = v
		switch {
		case errors.Is(v.Err, ErrNoSelectedAction):
		case v.Err != nil:
			bad = append(bad, v.Err.Error())
		case v.Ignored:
			bad = append(bad, name+": ignores the hint")
		case len(v.Warnings) > 0:
			bad = append(bad, name+": "+strings.Join(v.Warnings, "; "))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return out, fmt.Errorf("receivers would not take the hint as sent: %s", strings.Join(bad, "; "))
	}
	return out, nil
}
