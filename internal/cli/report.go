package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// problem is one problem `kvhint validate` reports, in text or as JSON.
type problem struct {
	// File is the -f argument the problem is in ("-" for standard input).
	File string `json:"file"`
	// Line is the 1-based line it points at; 0 (left out) when unknown.
	Line int `json:"line,omitempty"`
	// Object is what the problem is about: "RouterRole ns/name",
	// "HintPolicy name", "role decode" in a hints YAML, "document 2" for a
	// manifest document that cannot be read; empty for the file as a whole.
	Object string `json:"object,omitempty"`
	// Location is the field in the object: "spec.hints[1]" in a manifest,
	// "worker_selection.decode.hints[1].parameters.ttl_seconds" in a hints
	// YAML.
	Location string `json:"location,omitempty"`
	// Type is the policy type concerned, or for a policyRef item the
	// HintPolicy and its type.
	Type string `json:"type,omitempty"`
	// Key is the parameter key concerned.
	Key string `json:"key,omitempty"`
	// Reason is the condition reason the manager would report (or the
	// hints core's reason for a rule the API server enforces).
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Severity is "error" (exit 1) or "warning" (printed, exit 0).
	Severity string `json:"severity"`

	// where is the text form of Object, Location and Type.
	where string
}

// text renders "FILE:LINE: WHERE: Reason: message", the form compilers
// use and CI problem matchers read; ":LINE" is left out when unknown.
func (p problem) text() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.where != "" {
		b.WriteString(p.where + ": ")
	}
	b.WriteString(p.Reason)
	if p.Severity == severityWarning {
		b.WriteString(" (warning)")
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

const (
	severityError   = "error"
	severityWarning = "warning"
)

// hintsProblem turns a problem of a hints YAML file into a report.
func hintsProblem(file string, p hintsconfig.Problem) problem {
	r := problem{
		File: file, Line: p.Line, Type: p.Type, Key: p.Key,
		Reason: string(p.Reason), Message: p.Message, Severity: p.Severity.String(),
		where: p.Location(),
	}
	if p.Role != "" {
		r.Object = "role " + p.Role
		r.Location = "worker_selection." + p.Role
		if p.Hint != hintsconfig.NoHint {
			r.Location += fmt.Sprintf(".hints[%d]", p.Hint)
		}
		if p.Key != "" {
			r.Location += ".parameters." + p.Key
		}
	}
	return r
}

// report is the JSON document of `kvhint validate --output json`.
type report struct {
	// Valid is true when no problem is an error and every file was read.
	Valid bool `json:"valid"`
	// Files are the files checked, directories expanded.
	Files    []string  `json:"files"`
	Problems []problem `json:"problems"`
}

func writeReport(w io.Writer, r report) error {
	if r.Problems == nil {
		r.Problems = []problem{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
