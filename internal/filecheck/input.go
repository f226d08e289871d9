package filecheck

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// ReadInput reads one -f argument ("-" is standard input), refusing files
// over the config size cap before they are read whole.
func ReadInput(name string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, hintsconfig.MaxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > hintsconfig.MaxConfigBytes {
		return nil, fmt.Errorf("larger than the %d-byte limit", hintsconfig.MaxConfigBytes)
	}
	return data, nil
}

// ExpandInputs replaces each directory among the -f arguments with the
// YAML and JSON files directly inside it, in name order, as kubectl -f does.
func ExpandInputs(names []string) ([]string, error) {
	var out []string
	for _, name := range names {
		st, err := os.Stat(name)
		if name == "-" || err != nil || !st.IsDir() {
			out = append(out, name) // read errors are reported per file
			continue
		}
		entries, err := os.ReadDir(name)
		if err != nil {
			return nil, err
		}
		var found []string
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					found = append(found, filepath.Join(name, e.Name()))
				}
			}
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no .yaml, .yml or .json files in the directory", name)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}
