// Package proctest holds what the tests that run the kvhint binaries as
// processes share. Only tests import it.
package proctest

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// StopBySIGTERM sends a process SIGTERM and fails unless it exits cleanly
// within 10 s; exited receives its Wait result.
func StopBySIGTERM(t testing.TB, proc *exec.Cmd, exited <-chan error) {
	t.Helper()
	name := filepath.Base(proc.Path)
	if len(proc.Args) > 1 {
		name += " " + proc.Args[1]
	}
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s exit after SIGTERM: %v", name, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit within 10s of SIGTERM", name)
	}
}
