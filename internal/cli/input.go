package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/kvrouter/kv-hint-operator/internal/hints"
)

// readInput reads one -f argument ("-" is standard input), refusing files
// over the config size cap before they are read whole.
func readInput(name string, stdin io.Reader) ([]byte, error) {
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
	data, err := io.ReadAll(io.LimitReader(r, hints.MaxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > hints.MaxConfigBytes {
		return nil, fmt.Errorf("larger than the %d-byte limit", hints.MaxConfigBytes)
	}
	return data, nil
}
