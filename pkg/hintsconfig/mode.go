package hintsconfig

import "strings"

// RouterMode is how a router books workers for a role: the router's
// --router-mode flag (DYN_ROUTER_MODE in Dynamo), or a worker set's own
// flags. Only ModeKV is the KV path, where worker-selection and hint
// policies run. It is never a key of the policy file.
type RouterMode string

const (
	ModeKV                  RouterMode = "kv"
	ModeRoundRobin          RouterMode = "round-robin"
	ModeRandom              RouterMode = "random"
	ModePowerOfTwo          RouterMode = "power-of-two"
	ModeLeastLoaded         RouterMode = "least-loaded"
	ModeDeviceAwareWeighted RouterMode = "device-aware-weighted"
	ModeDirect              RouterMode = "direct"
)

// RouterModes lists every router mode, in the order Dynamo's --router-mode
// help lists them, KV first.
var RouterModes = []RouterMode{ModeKV, ModeRoundRobin, ModeRandom, ModePowerOfTwo, ModeLeastLoaded, ModeDeviceAwareWeighted, ModeDirect}

// Valid reports whether m is a known router mode.
func (m RouterMode) Valid() bool {
	for _, k := range RouterModes {
		if m == k {
			return true
		}
	}
	return false
}

// RouterModeList is the router modes, comma separated, for messages and
// flag help.
func RouterModeList() string {
	s := make([]string, len(RouterModes))
	for i, m := range RouterModes {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// Modes says which router mode each role of a config runs under. A router
// started on a policy file alone runs every role under its --router-mode
// (Default); a compiled ConfigMap carries each role's mode next to the
// file (Roles), since a worker set may be started with a mode of its own.
type Modes struct {
	// Default is the mode of roles that Roles does not name; empty means
	// ModeKV.
	Default RouterMode
	// Roles are per-role modes.
	Roles map[string]RouterMode
	// Flag names where Default came from in messages, such as
	// "--router-mode"; empty for "the router mode".
	Flag string
}

// For returns the mode a role runs under.
func (m Modes) For(role string) RouterMode {
	if r, ok := m.Roles[role]; ok && r != "" {
		return r
	}
	if m.Default == "" {
		return ModeKV
	}
	return m.Default
}

// origin says, for a message, where a role's mode came from.
func (m Modes) origin(role string) string {
	if _, ok := m.Roles[role]; ok {
		return "the role's router mode"
	}
	if m.Flag != "" {
		return m.Flag
	}
	return "the router mode"
}
