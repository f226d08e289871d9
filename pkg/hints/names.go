package hints

import (
	"errors"
	"fmt"
	"strings"
)

// MaxNameLength is the longest role, type or hint name: a DNS label.
const MaxNameLength = 63

// CheckName reports why s cannot name a policy type, a role or a hint, or
// nil: names are RFC 1123 labels (lower-case alphanumerics and '-', starting
// and ending alphanumeric, at most MaxNameLength characters), the same rule
// Kubernetes applies to label values and DNS names.
func CheckName(s string) error {
	return checkIdentifier(s, "-", "must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit")
}

// CheckTypeName reports why s cannot name a policy type, or nil. A type
// name is a CheckName label, or more widely an identifier as Dynamo's
// router spells its policy types: letters of either case, digits, '_',
// '.' and '-', starting and ending with a letter or digit, at most
// MaxNameLength characters (harness_prefetch, say). Role and hint names
// stay labels (CheckName): they name objects and metrics.
func CheckTypeName(s string) error {
	return checkIdentifier(s, "-_.", "must be a policy type name: letters, digits, '_', '.' and '-', starting and ending with a letter or digit")
}

// checkIdentifier checks a name of at most MaxNameLength characters:
// lower-case letters and digits, the upper-case letters too when inner
// allows '_' (a type name), and the characters of inner anywhere but at
// either end.
func checkIdentifier(s, inner, rule string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > MaxNameLength {
		return fmt.Errorf("is %d characters, over the %d allowed", len(s), MaxNameLength)
	}
	upper := strings.Contains(inner, "_")
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || upper && c >= 'A' && c <= 'Z'
		if alnum || strings.IndexByte(inner, c) >= 0 && i > 0 && i < len(s)-1 {
			continue
		}
		return errors.New(rule)
	}
	return nil
}
