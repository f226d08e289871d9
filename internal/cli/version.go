package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// The release stamps these with the linker's -X (make release): the
// release's version, its commit and the commit's date (RFC 3339, UTC).
var (
	version = ""
	commit  = ""
	date    = ""
)

// BuildInfo is what `kvhint version` prints.
type BuildInfo struct {
	Version, Commit, Date, GoVersion, Platform string
}

// Build returns the version, commit and date the release stamped, or
// else what the Go toolchain recorded: the module version for `go install
// ...@vX.Y.Z`, the VCS revision and time for a build from a checkout.
func Build() BuildInfo {
	b := BuildInfo{Version: version, Commit: commit, Date: date,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit == "" && b.Commit != "" {
			b.Commit += "-dirty"
		}
	}
	for _, f := range []*string{&b.Version, &b.Commit, &b.Date} {
		if *f == "" {
			*f = "unknown"
		}
	}
	if b.Version == "unknown" {
		b.Version = "dev"
	}
	return b
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this kvhint's version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := Build()
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "kvhint %s\ncommit: %s\ndate: %s\ngo: %s\nplatform: %s\n",
				b.Version, b.Commit, b.Date, b.GoVersion, b.Platform)
			return err
		},
	}
}
