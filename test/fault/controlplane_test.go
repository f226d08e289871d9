package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

const namespace = "fault"

// The control plane, the manager, the sidecars and the workers of
// devenv, shared by the tests of this file and started on first use.
var (
	envOnce sync.Once
	env     *devenv.Env
	envErr  error
	// apiServer is a kube-apiserver restarted by a test, stopped by
	// stopEnv; envtest only knows the one it started.
	apiServer *exec.Cmd
)

func testEnv(t *testing.T) *devenv.Env {
	t.Helper()
	assets := testenv.RequireAssets(t)
	envOnce.Do(func() {
		dir := filepath.Join(tmpDir, "env")
		if envErr = os.MkdirAll(dir, 0o755); envErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		env, envErr = devenv.Start(ctx, devenv.Options{Bin: kvhint, WorkerBin: devBin, Assets: assets, Dir: dir, Namespace: namespace})
		if envErr != nil {
			return
		}
		if _, envErr = env.ApplySamples(ctx); envErr != nil {
			return
		}
		envErr = env.WaitSidecarsReady(ctx, time.Minute)
	})
	if envErr != nil {
		t.Fatalf("starting the environment: %v", envErr)
	}
	return env
}

// stopEnv stops the environment's processes first, while the API server
// they watch is up: a kube-apiserver told to stop before them waits on
// their open watches, up to a minute, before it exits (70 s of this
// package's run, spent after its last test). The kube-apiserver
// TestAPIServerOutage started again is then killed: its store, etcd, is
// gone with the environment, and it holds nothing to save.
func stopEnv() {
	if env != nil {
		env.Stop()
	}
	if apiServer != nil {
		apiServer.Process.Kill()
		apiServer.Wait()
	}
}

// rolesReady waits until every RouterRole is Ready for its generation and
// returns the lastTransitionTime of each one's Ready condition.
func rolesReady(t *testing.T, d time.Duration) map[string]metav1.Time {
	t.Helper()
	out := map[string]metav1.Time{}
	testenv.Eventually(t, d, "every RouterRole Ready", func(context.Context) error {
		var rrs v1alpha1.RouterRoleList
		if err := env.Client.List(context.Background(), &rrs, client.InNamespace(namespace)); err != nil {
			return err
		}
		if len(rrs.Items) == 0 {
			return errors.New("no RouterRoles")
		}
		for _, rr := range rrs.Items {
			c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionReady))
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != rr.Generation {
				return fmt.Errorf("%s not Ready: %+v", rr.Name, c)
			}
			out[rr.Name] = c.LastTransitionTime
		}
		return nil
	})
	return out
}

// setRetainTTL changes the HintPolicy session-retain of router chat.
func setRetainTTL(t *testing.T, ttl int) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"parameters":{"ttl_seconds":%d}}}`, ttl))
	hp := &v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "session-retain"}}
	if err := env.Client.Patch(context.Background(), hp, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// waitProgrammed waits until chat's compiled config holds ttl and chat's
// sidecar runs it; it returns the hash. It logs when the compiled config
// got the change, so a slow step shows which side was slow.
func waitProgrammed(t *testing.T, ttl int, d time.Duration) (hash string, compiled, running time.Duration) {
	t.Helper()
	start := time.Now()
	defer func() {
		running = time.Since(start)
		t.Logf("ttl_seconds %d: compiled after %v, running after %v", ttl, compiled.Round(time.Millisecond), running.Round(time.Millisecond))
	}()
	testenv.Eventually(t, d, fmt.Sprintf("ttl_seconds %d programmed on chat", ttl), func(context.Context) error {
		var cm corev1.ConfigMap
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: v1alpha1.HintsConfigMapName("chat")}, &cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "ttl_seconds: "+strconv.Itoa(ttl)) {
			return fmt.Errorf("the compiled config lacks ttl_seconds %d", ttl)
		}
		hash = cm.Annotations[v1alpha1.HashAnnotation]
		if compiled == 0 {
			compiled = time.Since(start)
		}
		var pod corev1.Pod
		s := env.Sidecar("chat")
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: s.PodName}, &pod); err != nil {
			return err
		}
		if got := pod.Annotations[v1alpha1.AppliedHashAnnotation]; got != hash {
			return fmt.Errorf("chat's sidecar runs %s, the compiled config is %s", got, hash)
		}
		return nil
	})
	return hash, compiled, time.Since(start)
}

// apiServerPID finds the kube-apiserver this process started.
func apiServerPID(t *testing.T) int {
	t.Helper()
	if apiServer != nil {
		return apiServer.Process.Pid
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+2:])
		if strings.Contains(s[:i], "(kube-apiserver") && len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			return pid
		}
	}
	t.Fatal("no kube-apiserver child found")
	return 0
}

// TestAPIServerOutage kills kube-apiserver for 30 s (etcd stays) and
// starts it again with the same arguments. A change made just before the
// outage is programmed after it, and so is one made after it; bookings go
// on through the outage on the config in force; the roles the changes did
// not touch never leave Ready (their Ready lastTransitionTime does not
// move); the manager and the sidecars recover without a restart, and their
// descriptors and goroutines come back.
func TestAPIServerOutage(t *testing.T) {
	testEnv(t)
	before := rolesReady(t, 90*time.Second)
	chat := env.Sidecar("chat")
	sidecarBefore := measure(t, chat.Proc.PID(), chat.OpsURL)
	managerBefore := measure(t, env.Manager.PID(), "")

	// A change the manager may or may not have seen when the API goes.
	setRetainTTL(t, 700)
	pid := apiServerPID(t)
	args, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(strings.TrimRight(string(args), "\x00"), "\x00")
	// Killed, as a crash or a node loss would: a graceful stop waits on
	// its open watches for up to a minute.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "kube-apiserver stopped", func(context.Context) error {
		if err := syscall.Kill(pid, 0); err == nil {
			// A zombie of envtest's until it reaps it counts as gone.
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(st), ") Z ") {
				return errors.New("still running")
			}
		}
		return nil
	})
	down := time.Now()
	t.Logf("kube-apiserver stopped")

	// Bookings through the outage, on the config in force. A booking whose
	// policies overran their deadline on this busy machine is answered
	// 204 no_actions, and counted in policy_failures_total: that is the
	// deadline at work, not the outage, so such answers are matched
	// against the counter rather than taken for failures.
	deadlineDrops := func() float64 {
		n := 0.0
		for k, v := range scrape(t, chat.OpsURL) {
			if strings.HasPrefix(k, "kvhint_router_policy_failures_total{") && strings.Contains(k, `reason="deadline"`) {
				n += v
			}
		}
		return n
	}
	dropsBefore := deadlineDrops()
	noActions := 0
	bookings, failures := 0, 0
	var lastErr string
	for time.Since(down) < 30*time.Second {
		resp, err := http.Post(chat.BookingURL+"/v1/bookings", "application/json",
			strings.NewReader(fmt.Sprintf(`{"request_id":"out-%d","role":"decode","worker":"chat-0","prompt_tokens":600,"block_size":16,"session":{"id":"s","turn":1,"final":false}}`, bookings)))
		bookings++
		if err == nil && resp.StatusCode == http.StatusNoContent && resp.Header.Get("Kvhint-Outcome") == "no_actions" {
			noActions++
		} else if err != nil || resp.StatusCode != http.StatusOK {
			failures++
			if err != nil {
				lastErr = err.Error()
			} else {
				lastErr = resp.Status + " " + resp.Header.Get("Kvhint-Outcome")
			}
		}
		if resp != nil {
			resp.Body.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	if failures > 0 {
		t.Errorf("%d of %d bookings failed during the outage: %s", failures, bookings, lastErr)
	}
	if drops := deadlineDrops() - dropsBefore; float64(noActions) > drops {
		t.Errorf("%d of %d bookings kept no action during the outage, and only %v policy runs overran their deadline", noActions, bookings, drops)
	} else if noActions > 0 {
		t.Logf("%d of %d bookings lost their actions to the policy deadline on this busy machine (%v deadline drops counted)", noActions, bookings, drops)
	}
	if !env.Manager.Running() || !chat.Proc.Running() {
		t.Fatalf("a process died in the outage: manager %v, sidecar %v", env.Manager.Running(), chat.Proc.Running())
	}
	during := measure(t, chat.Proc.PID(), chat.OpsURL)

	apiServer = exec.Command(exe, argv[1:]...)
	apiServer.Stdout, apiServer.Stderr = nil, nil
	apiServer.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := apiServer.Start(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	kc := kubernetes.NewForConfigOrDie(env.CP.Config)
	testenv.Eventually(t, 60*time.Second, "kube-apiserver ready", func(context.Context) error {
		_, err := kc.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err
	})
	t.Logf("kube-apiserver down %v, ready %v after its restart", up.Sub(down).Round(time.Second), time.Since(up).Round(time.Millisecond))

	// Bounds. The manager's cache and the sidecar's informers try a
	// broken watch again every 2 s (internal/apiwatch; client-go alone
	// backs off up to 30 s and as much jitter again: 20 to 48 s here),
	// and the sidecar retries its report every 5 s at most: a change is
	// compiled and running within 30 s of the restart on a loaded box,
	// and the sidecar runs what was compiled within 10 s.
	sidecarPart := func(compiled, running time.Duration) {
		t.Helper()
		if lag := running - compiled; lag > 10*time.Second {
			t.Errorf("the sidecar ran the compiled config %v after it was compiled, over 10 s", lag)
		}
	}
	sidecarPart(func() (time.Duration, time.Duration) { _, c, r := waitProgrammed(t, 700, 30*time.Second); return c, r }())
	t.Logf("the change made before the outage programmed %v after the restart", time.Since(up).Round(time.Millisecond))
	setRetainTTL(t, 800)
	changed := time.Now()
	sidecarPart(func() (time.Duration, time.Duration) { _, c, r := waitProgrammed(t, 800, 30*time.Second); return c, r }())
	t.Logf("a change after the restart programmed in %v", time.Since(changed).Round(time.Millisecond))

	after := rolesReady(t, 30*time.Second)
	for name, ts := range before {
		if name == "chat-decode" {
			continue // changed twice on purpose
		}
		if a := after[name]; !a.Equal(&ts) {
			t.Errorf("%s Ready moved from %v to %v: its status flapped", name, ts, after[name])
		}
	}
	sidecarAfter := measure(t, chat.Proc.PID(), chat.OpsURL)
	managerAfter := measure(t, env.Manager.PID(), "")
	t.Logf("chat sidecar: before %s, in the outage %s, after %s; manager: before %s, after %s", sidecarBefore, during, sidecarAfter, managerBefore, managerAfter)
	if sidecarAfter.FDs > sidecarBefore.FDs+8 || sidecarAfter.Goroutines > sidecarBefore.Goroutines+20 {
		t.Errorf("the sidecar kept resources from the outage: before %s, after %s", sidecarBefore, sidecarAfter)
	}
	if managerAfter.FDs > managerBefore.FDs+16 {
		t.Errorf("the manager kept descriptors from the outage: before %s, after %s", managerBefore, managerAfter)
	}
}

// TestLeaderHandover runs two managers with --leader-elect in place of
// the environment's one, kills the leader (no release, as a crash) and
// makes a change at once. The other takes over within the Lease's
// duration (controller-runtime's default, 15 s) and two retry periods, the
// change is programmed, and the compiled ConfigMap is written once for
// it: no change lost, no duplicate write.
func TestLeaderHandover(t *testing.T) {
	testEnv(t)
	rolesReady(t, 90*time.Second)
	if err := env.Manager.Stop(10 * time.Second); err != nil {
		// What it was doing when SIGTERM found it.
		t.Fatalf("%v; its log ends:\n%s", err, env.Manager.Tail(8192))
	}
	t.Cleanup(func() {
		if err := env.StartManager(context.Background()); err != nil {
			t.Errorf("restarting the environment's manager: %v", err)
		}
	})
	var (
		managers    []*devenv.Process
		metricsURLs []string
	)
	for i := range 2 {
		mp, err := devenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		pp, err := devenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p := devenv.NewProcess(fmt.Sprint("manager-", i), kvhint, []string{"manager",
			"--kubeconfig", env.CP.Kubeconfig, "--namespace", namespace,
			"--leader-elect", "--leader-election-namespace", namespace,
			// Plain HTTP on loopback, so that the test reads who leads
			// from the metrics without a token.
			"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(mp), "--metrics-secure=false",
			"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(pp)}, nil, t.TempDir())
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(10 * time.Second) })
		managers = append(managers, p)
		metricsURLs = append(metricsURLs, "http://127.0.0.1:"+strconv.Itoa(mp))
	}
	leader, follower := -1, -1
	testenv.Eventually(t, 60*time.Second, "a leader", func(context.Context) error {
		for i := range managers {
			if isLeader(t, metricsURLs[i]) {
				leader, follower = i, 1-i
				return nil
			}
		}
		return errors.New("no manager holds the lease")
	})
	// Both are up and one leads; the follower must not reconcile.
	setRetainTTL(t, 1100)
	waitProgrammed(t, 1100, 30*time.Second)
	if isLeader(t, metricsURLs[follower]) {
		t.Fatal("both managers lead")
	}

	// Count the writes to chat's compiled ConfigMap from here on.
	kc := kubernetes.NewForConfigOrDie(env.CP.Config)
	var cm corev1.ConfigMap
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: v1alpha1.HintsConfigMapName("chat")}, &cm); err != nil {
		t.Fatal(err)
	}
	w, err := kc.CoreV1().ConfigMaps(namespace).Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + cm.Name, ResourceVersion: cm.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	managers[leader].Kill()
	killed := time.Now()
	setRetainTTL(t, 1200)
	testenv.Eventually(t, 30*time.Second, "the follower takes the lease", func(context.Context) error {
		if !isLeader(t, metricsURLs[follower]) {
			return errors.New("not yet")
		}
		return nil
	})
	tookOver := time.Since(killed)
	waitProgrammed(t, 1200, 30*time.Second)
	programmed := time.Since(killed)
	t.Logf("leader killed: the follower took the lease after %v, the change made meanwhile was programmed after %v",
		tookOver.Round(time.Millisecond), programmed.Round(time.Millisecond))
	// The follower sees the last renewal up to one retry period (2 s,
	// jittered to 2.4 s) late and tries again every retry period: the
	// lease's 15 s and two such periods.
	if tookOver > 15*time.Second+2*2400*time.Millisecond+3*time.Second {
		t.Errorf("takeover took %v, over the 15 s lease, two 2.4 s retry periods and 3 s of slack", tookOver)
	}
	// Writes: one for the change; give a duplicate two seconds to show.
	writes := 0
	quiet := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == "MODIFIED" {
				writes++
			}
		case <-quiet:
			done = true
		}
	}
	if writes != 1 {
		t.Errorf("chat's compiled ConfigMap was written %d times for one change, want 1", writes)
	}
}

// isLeader reads controller-runtime's leader_election_master_status from a
// manager's metrics.
func isLeader(t *testing.T, metricsURL string) bool {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(metricsURL + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}
