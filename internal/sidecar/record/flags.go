package record

import (
	"fmt"

	"github.com/spf13/pflag"
)

// AddFlags registers the recorder's flags (--record-trace and the
// --record-* settings that need it) on fs, into o.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	f := fs
	f.StringVar(&o.Path, "record-trace", "", "record sampled bookings to this trace file for kvhint preview (hashes and ids remapped per recording; off when empty)")
	f.Float64Var(&o.SampleRate, "record-sample-rate", 0.01, "share of requests recorded, in (0, 1]; all roles of a request together")
	f.Int64Var(&o.MaxBytes, "record-max-bytes", DefaultMaxBytes, "rotate the trace file at this size")
	f.IntVar(&o.MaxFiles, "record-max-files", DefaultMaxFiles, fmt.Sprintf("rotated trace files kept (PATH.1 ...), from 1 to %d; a file an earlier run left at PATH is rotated aside at start", MaxMaxFiles))
	f.Int64Var(&o.MaxQueueBytes, "record-max-queued-bytes", DefaultMaxQueueBytes, "memory of the sampled bookings waiting for the trace writer (part of the sidecar's memory budget); a booking past it is dropped and counted")
	f.DurationVar(&o.FlushInterval, "record-flush-interval", DefaultFlushInterval, "longest a recorded row waits in memory before it is written (what a kill may lose)")
}

// flagNames are the flags that need --record-trace.
var flagNames = []string{"record-sample-rate", "record-max-bytes", "record-max-files", "record-max-queued-bytes", "record-flush-interval"}

// CheckFlags refuses the recorder's flags out of range, naming the flag,
// and its settings given without --record-trace (fs says which were
// given).
func (o *Options) CheckFlags(fs *pflag.FlagSet) error {
	if o.Path == "" {
		for _, name := range flagNames {
			if fs.Changed(name) {
				return fmt.Errorf("--%s needs --record-trace PATH", name)
			}
		}
		return nil
	}
	switch {
	case !(o.SampleRate > 0 && o.SampleRate <= 1):
		return fmt.Errorf("--record-sample-rate is %g; it must be above 0 and at most 1", o.SampleRate)
	case o.MaxBytes <= 0:
		return fmt.Errorf("--record-max-bytes is %d; it must be above 0", o.MaxBytes)
	case o.MaxFiles < 1 || o.MaxFiles > MaxMaxFiles:
		return fmt.Errorf("--record-max-files is %d; it must be from 1 to %d", o.MaxFiles, MaxMaxFiles)
	case o.MaxQueueBytes <= 0:
		return fmt.Errorf("--record-max-queued-bytes is %d; it must be above 0", o.MaxQueueBytes)
	case o.FlushInterval <= 0:
		return fmt.Errorf("--record-flush-interval is %v; it must be above 0", o.FlushInterval)
	}
	return nil
}
