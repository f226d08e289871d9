package filecheck

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Config is one config `kvhint compile -f` reads from its inputs: the
// policy file and the modes its roles run under, as a router would load
// it. A router with no accepted role has a nil Doc and only a Note.
type Config struct {
	Doc   []byte
	Modes hintsconfig.Modes
	Form  hintsconfig.Form // Doc's policy-file form
	Hash  string
	// Note says, for standard error, what the config is and where it came
	// from.
	Note string
	// Router is the router's name, for manifests.
	Router string
}

// ErrInvalid is Load's error for an input that breaks a rule, and
// ErrUsage for one that cannot be read or a router that is not there;
// what is wrong has been written already.
var (
	ErrInvalid = errors.New("an input breaks a rule")
	ErrUsage   = errors.New("an input cannot be used")
)

// loadCompiled reads the -f inputs the way `kvhint compile -f` does (hints
// YAML files one by one, manifests together as the manager compiles them)
// and returns the configs they compile to, in order. Problems go to
// stderr; an input that breaks a rule returns ExitInvalid, an unreadable
// one or a bad --router ExitUsage. With router set, only that router's
// config is returned (and hints YAML files are ignored).
func Load(cat *hints.Catalog, files []string, router string, modes hintsconfig.Modes, read FileRead, routersForm hintsconfig.Form, stdin io.Reader, w io.Writer) ([]Config, error) {
	files, err := ExpandInputs(files)
	if err != nil {
		fmt.Fprintln(w, err)
		return nil, ErrUsage
	}
	var out []Config
	manifests := NewManifestSet(routersForm, read.Target, read.Declared)
	for _, name := range files {
		data, err := ReadInput(name, stdin)
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", name, err)
			return nil, ErrUsage
		}
		if rolegraph.IsManifest(data) {
			manifests.Add(name, data)
			continue
		}
		if router != "" {
			continue
		}
		g, probs := CompileHintsYAML(cat, data, modes, read)
		for _, p := range probs {
			fmt.Fprintln(w, HintsProblem(name, p).Text())
		}
		if probs.HasErrors() {
			return nil, ErrInvalid
		}
		doc, hash, err := g.Encode()
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", name, err)
			return nil, ErrInvalid
		}
		out = append(out, Config{Doc: doc, Hash: hash, Form: g.Form, Modes: modes,
			Note: fmt.Sprintf("# %s: hash %s", name, hash)})
	}
	if len(manifests.Files()) > 0 {
		routers := manifests.Compile(cat)
		manifests.Print(w)
		if manifests.Failed() {
			return nil, ErrInvalid
		}
		var names []string
		found := false
		for _, r := range routers {
			names = append(names, r.Router.Name)
			if router != "" && r.Router.Name != router {
				continue
			}
			c := Config{Doc: r.Router.Config, Hash: r.Router.Hash, Note: r.Note(), Router: r.Router.Name}
			if r.Router.Compiled != nil {
				c.Form = r.Router.Compiled.Form
				c.Modes = hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{}}
				for role, s := range r.Router.Compiled.Roles {
					c.Modes.Roles[role] = s.RouterMode
				}
			}
			found = found || c.Doc != nil
			out = append(out, c)
		}
		if router != "" && !found {
			fmt.Fprintf(w, "no router %q in the manifests; routers: %s\n", router, strings.Join(names, ", "))
			return nil, ErrUsage
		}
	}
	if router != "" && len(manifests.Files()) == 0 {
		fmt.Fprintln(w, "--router selects among the routers of manifests, and no file is a manifest")
		return nil, ErrUsage
	}
	return out, nil
}
