package hintsconfig

import "strings"

// RouterMode is how a router books workers for a role. Only ModeKV is the KV
// path, where worker-selection and hint policies run.
type RouterMode string

const (
	ModeKV          RouterMode = "kv"
	ModeRoundRobin  RouterMode = "round-robin"
	ModeRandom      RouterMode = "random"
	ModeLeastLoaded RouterMode = "least-loaded"
	ModePowerOfTwo  RouterMode = "power-of-two"
	ModeDirect      RouterMode = "direct"
)

// RouterModes lists every router mode.
var RouterModes = []RouterMode{ModeKV, ModeRoundRobin, ModeRandom, ModeLeastLoaded, ModePowerOfTwo, ModeDirect}

// Valid reports whether m is a known router mode.
func (m RouterMode) Valid() bool {
	for _, k := range RouterModes {
		if m == k {
			return true
		}
	}
	return false
}

func routerModeList() string {
	s := make([]string, len(RouterModes))
	for i, m := range RouterModes {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}
