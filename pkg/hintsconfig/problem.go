package hintsconfig

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// Reason is the stable, machine-readable cause of a problem. The operator
// uses it as the Reason of the Accepted condition, so values never change:
// each is written once, in pkg/wellknown, which api/v1alpha1 reads too.
type Reason string

// Reasons for errors.
const (
	ReasonInvalidConfig          Reason = wellknown.ReasonInvalidConfig
	ReasonInvalidRole            Reason = wellknown.ReasonInvalidRole
	ReasonInvalidRouterMode      Reason = wellknown.ReasonInvalidRouterMode
	ReasonUnknownWorkerSelection Reason = wellknown.ReasonUnknownWorkerSelection
	ReasonInvalidParameters      Reason = wellknown.ReasonInvalidParameters
	ReasonUnknownHintType        Reason = wellknown.ReasonUnknownHintType
	ReasonInvalidHintName        Reason = wellknown.ReasonInvalidHintName
	ReasonDuplicateHintName      Reason = wellknown.ReasonDuplicateHintName
	ReasonTooManyHints           Reason = wellknown.ReasonTooManyHints
	ReasonHintsRequireKVMode     Reason = wellknown.ReasonHintsRequireKVMode
	ReasonKVCopySenderMissing    Reason = wellknown.ReasonKVCopySenderMissing
	ReasonKVCopySenderDuplicate  Reason = wellknown.ReasonKVCopySenderDuplicate
)

// Reasons for warnings.
const (
	// ReasonKVCopySenderUnused: a KVCopy hint under a selection that never
	// commits copies; it will never send anything.
	ReasonKVCopySenderUnused Reason = "KVCopySenderUnused"
	// ReasonNotChecked: a root key of Dynamo's router policy file that
	// kvhint keeps as written without checking it (policy_classes,
	// models, ...); Dynamo's router checks it at start-up.
	ReasonNotChecked Reason = "NotChecked"
	// ReasonParameterWarning: a parameter the policy accepts whose effect
	// deserves a look (a shared_cache_multiplier above 1, say).
	ReasonParameterWarning Reason = "ParameterWarning"
)

// Severity separates what blocks a configuration from what only deserves a look.
type Severity int

const (
	SeverityError Severity = iota
	SeverityWarning
)

func (s Severity) String() string {
	if s == SeverityWarning {
		return "warning"
	}
	return "error"
}

// NoHint is the Hint index of a problem that concerns a role as a whole.
const NoHint = -1

// Problem is one broken rule, located as precisely as the input allows.
type Problem struct {
	Severity Severity
	Reason   Reason
	// Role is the role name; empty for problems of the whole file.
	Role string
	// Hint is the 0-based index of the hint item in the role's list, or NoHint.
	Hint int
	// Type is the worker-selection or hint type concerned, if any.
	Type string
	// Key is the parameter key concerned, if any.
	Key string
	// Line is the 1-based line of the YAML text the problem points at, when
	// the config was parsed from YAML text (ParseConfig) and the place is
	// known; 0 otherwise.
	Line int
	// Message says what is wrong and what to do, for a person.
	Message string
}

// Location renders where the problem is: "role decode/hint 2 (kv-retain)".
func (p Problem) Location() string {
	var b strings.Builder
	if p.Role == "" {
		b.WriteString("config")
	} else {
		b.WriteString("role ")
		b.WriteString(p.Role)
	}
	if p.Hint != NoHint {
		fmt.Fprintf(&b, "/hint %d", p.Hint)
	}
	if p.Type != "" {
		fmt.Fprintf(&b, " (%s)", p.Type)
	}
	return b.String()
}

// Error renders "role decode/hint 2 (kv-retain): InvalidParameters: ...".
func (p Problem) Error() string {
	return fmt.Sprintf("%s: %s: %s", p.Location(), p.Reason, p.Message)
}

// Problems is every problem found in one configuration.
type Problems []Problem

// Errors returns the problems that block the configuration.
func (ps Problems) Errors() Problems { return ps.filter(SeverityError) }

// Warnings returns the problems that do not block it.
func (ps Problems) Warnings() Problems { return ps.filter(SeverityWarning) }

// HasErrors reports whether any problem is an error.
func (ps Problems) HasErrors() bool {
	for _, p := range ps {
		if p.Severity == SeverityError {
			return true
		}
	}
	return false
}

// ForRole returns the problems of one role.
func (ps Problems) ForRole(role string) Problems {
	var out Problems
	for _, p := range ps {
		if p.Role == role {
			out = append(out, p)
		}
	}
	return out
}

func (ps Problems) filter(s Severity) Problems {
	var out Problems
	for _, p := range ps {
		if p.Severity == s {
			out = append(out, p)
		}
	}
	return out
}

// Error joins the errors, one a line, so Problems can be returned as an error.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// paramKey returns the key a provider's parameter error names, or "".
func paramKey(err error) string {
	if pe, ok := errors.AsType[*hints.ParamError](err); ok {
		return pe.Key
	}
	return ""
}
