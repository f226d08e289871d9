package fault

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRecorderRSSUnderLoadgen is the F8 probe on the real sidecar
// binary: `kvhint-dev loadgen` books prefill (a kvcr selection that
// commits a 40,000-hash KV copy on every booking, each answered with a
// ~840 KB kv.fetch hint) and decode at 40 requests a second for 10 s,
// against a sidecar that records every request (--record-sample-rate 1)
// and, for comparison, one that records nothing. It logs each one's RSS
// before and at its peak, and the trace written. Filed: 2.42 GB RSS while
// recording, 91 MB without. The recording sidecar must stay under the
// 256 MiB container limit it is given.
func TestRecorderRSSUnderLoadgen(t *testing.T) {
	const rate, duration = "40", "10s"
	run := func(record bool) (before, peak figures, trace int64, report string) {
		t.Helper()
		sink := startSink(t)
		workers := "workers:\n" + workerLine("p0", sink.HintEndpoint()) + workerLine("p1", sink.HintEndpoint()) + workerLine("d0", sink.HintEndpoint())
		tracePath := filepath.Join(t.TempDir(), "trace.jsonl")
		var args []string
		if record {
			args = []string{"--record-trace", tracePath, "--record-sample-rate", "1"}
		}
		s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: workers, env: []string{memoryLimitEnv}, args: args})
		pid := s.proc.PID()
		before = measure(t, pid, s.ops)
		pk := samplePeaks(t, pid, s.ops)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, devBin, "loadgen", "--target", s.booking, "--rate", rate, "--duration", duration,
			"--connections", "8", "--timeout", "5s",
			"--role", "prefill=p0,p1:copy=1:blocks=40000", "--role", "decode=d0").CombinedOutput()
		peak = pk.end()
		if err != nil {
			t.Fatalf("loadgen: %v\n%s", err, out)
		}
		if record {
			// The recorder flushes within --record-flush-interval (1 s).
			time.Sleep(2 * time.Second)
			var size int64
			for _, f := range []string{tracePath, tracePath + ".1", tracePath + ".2", tracePath + ".3"} {
				if st, err := os.Stat(f); err == nil {
					size += st.Size()
				}
			}
			trace = size
		}
		return before, peak, trace, string(out)
	}
	offBefore, offPeak, _, _ := run(false)
	onBefore, onPeak, trace, report := run(true)
	m := strconv.Itoa(memoryLimit >> 20)
	t.Logf("loadgen (%s/s for %s, 40,000-hash copies), recording off: before %s, peak %s", rate, duration, offBefore, offPeak)
	t.Logf("recording every request: before %s, peak %s; %d bytes of trace; limit %s MiB", onBefore, onPeak, trace, m)
	t.Logf("loadgen's report, recording:\n%s", strings.TrimSpace(report))
	if trace == 0 {
		t.Errorf("the recording sidecar wrote no trace")
	}
	if onPeak.RSSMiB >= float64(memoryLimit>>20) {
		t.Errorf("recording, peak RSS %.0f MiB, at or over the %s MiB container limit", onPeak.RSSMiB, m)
	}
}
