// Package samples carries config/samples inside the development binary, so
// `kvhint-dev dev` applies the same manifests a person would with kubectl apply -k.
package samples

import (
	"embed"
	"io/fs"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Manifests returns each sample file's name and content, in name order,
// without the kustomization.
func Manifests() (map[string][]byte, error) {
	paths, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, p := range paths {
		if strings.HasPrefix(p, "kustomization") {
			continue
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[p] = data
	}
	return out, nil
}
