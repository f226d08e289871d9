package cli

import (
	"cmp"
	"fmt"

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

// targetForms combines --target with --policy-file-form (flag) and the
// form the --catalog declaration states (declared), either empty when not
// given. It returns the form a hints YAML file given on its own is read
// and written in (empty: the file's own), and the form the routers of
// manifests are written in when no declared catalog of theirs states one
// (empty: each router's target decides, see rolegraph.RouterForm).
//
// --policy-file-form is the lower-level knob, and wins where it does not
// contradict the target: under --target dynamo the per-role form is
// written only for a build whose declared catalog says it reads it, so
// --policy-file-form PerRoleHints without such a declaration is refused
// rather than writing a file a released Frontend refuses to start with.
func targetForms(t hintsconfig.Target, flag, declared hintsconfig.Form) (file, manifests hintsconfig.Form, err error) {
	if t != hintsconfig.TargetDynamo {
		return cmp.Or(flag, declared), "", nil
	}
	if flag == hintsconfig.FormPerRoleHints && declared != hintsconfig.FormPerRoleHints {
		return "", "", fmt.Errorf("--target %s with --policy-file-form %s: a released Dynamo Frontend reads only the %s form "+
			"(worker_selection.<role> is \"invalid type: map, expected a string\" to it); a Dynamo build that reads per-role hints "+
			"says so in its declared catalog (--catalog FILE with policyFileForm: %s), or use --target %s",
			hintsconfig.TargetDynamo, hintsconfig.FormPerRoleHints, hintsconfig.FormRouterWideHint, hintsconfig.FormPerRoleHints, hintsconfig.TargetSidecar)
	}
	return cmp.Or(flag, declared, hintsconfig.FormRouterWideHint), hintsconfig.FormRouterWideHint, nil
}

// fileRead is how a hints YAML file given on its own is read: in form
// (empty: the file's own), by target, against a declared catalog or a
// stock build.
type fileRead struct {
	form     hintsconfig.Form
	target   hintsconfig.Target
	declared bool
}
