//go:build !unix

package delivery

// openFileLimit has no descriptor limit to read here.
func openFileLimit() (int, bool) { return 0, false }
