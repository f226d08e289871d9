package record

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestFlags: the recorder's flags parse into Options with their defaults,
// and CheckFlags refuses a value out of range or a setting without
// --record-trace, naming the flag.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for no error
	}{
		{nil, ""},
		{[]string{"--record-trace=/tmp/t.jsonl"}, ""},
		{[]string{"--record-sample-rate=0.5"}, "--record-sample-rate needs --record-trace PATH"},
		{[]string{"--record-trace=/tmp/t.jsonl", "--record-sample-rate=0"}, "--record-sample-rate is 0; it must be above 0 and at most 1"},
		{[]string{"--record-trace=/tmp/t.jsonl", "--record-max-files=0"}, "--record-max-files is 0; it must be from 1 to"},
		{[]string{"--record-trace=/tmp/t.jsonl", "--record-flush-interval=0s"}, "--record-flush-interval is 0s; it must be above 0"},
	} {
		var o Options
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if o.MaxFiles != DefaultMaxFiles && !fs.Changed("record-max-files") {
			t.Errorf("%q: --record-max-files defaults to %d, want %d", tc.args, o.MaxFiles, DefaultMaxFiles)
		}
		err := o.CheckFlags(fs)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
