package cli

import (
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// targetFlagHelp is the help of --target.
const targetFlagHelp = "the program that reads the policy file: sidecar (the kvhint sidecar; reads both forms, per-role by default) or dynamo " +
	"(a released Dynamo Frontend: the RouterWideHint form, unless the --catalog declaration says its build reads PerRoleHints). " +
	"Default: sidecar for a hints YAML file; for manifests, each router's own target (a restart-mode workload is a Dynamo Frontend)"

// targetFlag is --target: the program that reads the policy file, whose
// rules decide what is written and what is refused. An unknown target is
// a usage error.
type targetFlag struct{ t *hintsconfig.Target }

func (f targetFlag) String() string {
	if f.t == nil {
		return ""
	}
	return string(*f.t)
}

func (f targetFlag) Set(s string) error {
	t, err := hintsconfig.ParseTarget(s)
	if err != nil {
		return err
	}
	*f.t = t
	return nil
}

func (targetFlag) Type() string { return "target" }
