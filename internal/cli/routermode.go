package cli

import (
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// routerModeFlag is --router-mode: the router's mode for every role of a
// policy file given on its own, as Dynamo's router takes --router-mode
// next to --router-policy-config. An unknown mode is a usage error.
type routerModeFlag struct{ mode *hintsconfig.RouterMode }

func (f routerModeFlag) String() string {
	if f.mode == nil || *f.mode == "" {
		return string(hintsconfig.ModeKV)
	}
	return string(*f.mode)
}

func (f routerModeFlag) Set(s string) error {
	m := hintsconfig.RouterMode(s)
	if !m.Valid() {
		return fmt.Errorf("%q is not a router mode; use one of %s", s, hintsconfig.RouterModeList())
	}
	*f.mode = m
	return nil
}

func (routerModeFlag) Type() string { return "mode" }

// modesOf is the Modes a policy file given on its own runs under.
func modesOf(mode hintsconfig.RouterMode) hintsconfig.Modes {
	return hintsconfig.Modes{Default: mode, Flag: "--router-mode"}
}
