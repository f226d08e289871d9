package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// BinariesVar names the environment variable of a folder in which the
// test binaries of one run share their builds of the module's commands
// (hack/test.sh sets it for `make test`). Compiled packages come from Go's
// build cache, but the link of kvhint or kvhint-dev is done afresh by every
// go build into a new folder, and costs a core for seconds; a dozen
// packages build them. In the shared folder the first package to ask links
// a command and the others find it up to date: the go command skips the
// link when the file's build ID is the one it would write.
const BinariesVar = "KVHINT_TEST_BINARIES"

// Build builds the module's commands named (kvhint, kvhint-dev: folders of
// cmd/) into dir with the go command, from the module root, so that a
// suite runs the binaries the project ships, and returns their paths in
// the order named. With BinariesVar set they are built in that folder, one
// build at a time (a lock file there), and hard linked (else copied) into
// dir: a suite keeps the file it was given even if a later build replaces
// the shared one.
func Build(dir string, cmds ...string) ([]string, error) {
	repo, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bins := make([]string, len(cmds))
	for i, c := range cmds {
		bins[i] = filepath.Join(dir, c)
	}
	shared := os.Getenv(BinariesVar)
	if shared == "" {
		return bins, goBuild(repo, dir, cmds)
	}
	if err := buildShared(repo, shared, cmds); err != nil {
		return nil, err
	}
	for i, c := range cmds {
		if err := linkOrCopy(filepath.Join(shared, c), bins[i]); err != nil {
			return nil, fmt.Errorf("%s from %s=%s: %w", c, BinariesVar, shared, err)
		}
	}
	return bins, nil
}

// buildShared builds cmds into the shared folder while it holds the
// folder's lock: two packages that ask at once do not both link, and none
// runs a file another is still writing.
func buildShared(repo, shared string, cmds []string) error {
	if err := os.MkdirAll(shared, 0o755); err != nil {
		return fmt.Errorf("%s: %w", BinariesVar, err)
	}
	unlock, err := lockFolder(shared)
	if err != nil {
		return fmt.Errorf("locking %s=%s: %w", BinariesVar, shared, err)
	}
	defer unlock()
	return goBuild(repo, shared, cmds)
}

// lockFolder takes an exclusive flock on dir/.lock, waiting for it; the
// returned func releases it. The kernel releases it too when the process
// dies, so a test binary killed mid-build leaves no stale lock. (flock is
// Unix's; so is this package, as controller-runtime's envtest is.)
func lockFolder(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func goBuild(repo, dir string, cmds []string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, c := range cmds {
		args = append(args, "./cmd/"+c)
	}
	build := exec.Command("go", args...)
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", strings.Join(cmds, ", "), err, out)
	}
	return nil
}

// linkOrCopy makes dst the file src is, by a hard link, or by a copy where
// the two folders are on different file systems.
func linkOrCopy(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
