// Package devsuite runs a test suite against a whole local installation
// (internal/dev/devenv): the control plane, kvhint manager, the router
// pods' sidecars, the simulated workers and the front routers, from
// kvhint and kvhint-dev built for the suite. The end-to-end suites that
// share one installation (test/e2e, test/staged) start it here, once, in
// TestMain.
//
// Only tests import it; it imports devenv and testenv.
package devsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// Suite is a started installation, or why there is none.
type Suite struct {
	// Env is the installation; nil when the suite skips (Skip says why).
	Env *devenv.Env
	// Kvhint and DevBin are the binaries built for the suite.
	Kvhint, DevBin string
	// Skip is why Env is nil: the API server binaries are not there
	// (go test ./... without make test).
	Skip string
}

// Require returns the installation, or skips t with the reason there is
// none.
func (s *Suite) Require(t testing.TB) *devenv.Env {
	t.Helper()
	if s.Env == nil {
		t.Skip(s.Skip)
	}
	return s.Env
}

// Run builds kvhint and kvhint-dev, starts an installation with o (Bin,
// WorkerBin, Assets and Dir are filled in), hands it to setup, which keeps
// it for the tests and may prepare it (apply samples), runs the tests,
// prints the end of every process's log when one failed, and stops it.
// Without the API server binaries setup gets a suite with Skip set and
// the tests run (and skip). It returns the exit code for os.Exit.
func Run(m *testing.M, name string, o devenv.Options, setup func(context.Context, *Suite) error) int {
	s := &Suite{}
	assets, skip, err := testenv.Assets()
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	case skip != "":
		s.Skip = skip
		if err := setup(context.Background(), s); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			return 1
		}
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "kvhint-"+name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins, err := testenv.Build(dir, "kvhint", "kvhint-dev")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	s.Kvhint, s.DevBin = bins[0], bins[1]
	o.Bin, o.WorkerBin, o.Assets, o.Dir = s.Kvhint, s.DevBin, assets, dir
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if s.Env, err = devenv.Start(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "%s: starting the environment: %v\n", name, err)
		return 1
	}
	defer s.Env.Stop()
	if err := setup(ctx, s); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		procs := []*devenv.Process{s.Env.Manager}
		for _, sc := range s.Env.Sidecars {
			procs = append(procs, sc.Proc)
		}
		for _, p := range procs {
			fmt.Fprintf(os.Stderr, "\n=== end of %s\n%s\n", filepath.Base(p.Log), p.Tail(6144))
		}
	}
	return code
}
