package dynamograph

import (
	"strconv"
	"strings"
)

// ParseVersion reads the release line of a Dynamo version as a
// component's runtimeVersion, an image tag or a declaration writes it:
// "1.7", "1.7.0", "v1.7.1", "1.7.0-rc1" are 1 and 7. ok is false when s
// does not start with a major.minor version.
func ParseVersion(s string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(s, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	minorDigits := parts[1]
	if i := strings.IndexFunc(minorDigits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = minorDigits[:i]
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(minorDigits)
	return major, minor, err1 == nil && err2 == nil && major >= 0 && minor >= 0
}
