package filecheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Problem is one problem `kvhint validate` reports, in text or as JSON.
type Problem struct {
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

	// Where is the text form of Object, Location and Type.
	Where string `json:"-"`
}

// Text renders "FILE:LINE: WHERE: Reason: message", the form compilers
// use and CI problem matchers read; ":LINE" is left out when unknown.
func (p Problem) Text() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Where != "" {
		b.WriteString(p.Where + ": ")
	}
	b.WriteString(p.Reason)
	if p.Severity == SeverityWarning {
		b.WriteString(" (warning)")
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// The severities of a Problem.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// HintsProblem turns a problem of a hints YAML file into a report.
func HintsProblem(file string, p hintsconfig.Problem) Problem {
	r := Problem{
		File: file, Line: p.Line, Type: p.Type, Key: p.Key,
		Reason: string(p.Reason), Message: p.Message, Severity: p.Severity.String(),
		Where: p.Location(),
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

// Report is the JSON document of `kvhint validate --output json`.
type Report struct {
	// Valid is true when no problem is an error and every file was read.
	Valid bool `json:"valid"`
	// Files are the files checked, directories expanded.
	Files    []string  `json:"files"`
	Problems []Problem `json:"problems"`
}

// WriteReport writes r as indented JSON.
func WriteReport(w io.Writer, r Report) error {
	if r.Problems == nil {
		r.Problems = []Problem{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
