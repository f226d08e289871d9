package tutorial

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/controlplane"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// skips are the commands of the docs this test does not run, each with
// why. Every other command of the sections run is run as written, and
// must exit 0.
var skips = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`^helm `), "Helm needs the chart from a release or a registry; the local control plane installs the same objects from config/default (tools/chart's tests check that the chart renders them)"},
	{regexp.MustCompile(`^curl -fsSLO https://github.com/`), "downloads a release's file; the test writes install.yaml from config/default and router.yaml from config/router, as make release does"},
	{regexp.MustCompile(`^docker build`), "no container engine here; the images' binaries are built with go build"},
	{regexp.MustCompile(`ko build`), "no registry to push to; the images' binaries are built with go build"},
	{regexp.MustCompile(`kubectl (-n \S+ )?top `), "no metrics-server"},
	{regexp.MustCompile(`-k config/namespaced$`), "the alternative to config/default's cluster-wide manager; a cluster runs one of the two"},
}

// taggedFiles is where the docs read the repository's files at a release
// tag; the test reads them from its checkout instead (no network here).
const taggedFiles = "https://raw.githubusercontent.com/kvrouter/kv-hint-operator/v0.1.0/"

// sections are the parts of the docs whose sh blocks run, in the order a
// newcomer follows them; the rest of install.md runs last, after the
// runbooks have looked at the Ready roles.
var sections = []struct {
	file, section string
}{
	{"docs/install.md", "From nothing to a Ready RouterRole"},
	{"README.md", "A first role"},
	{"docs/runbooks.md", "Runbooks"},
	{"docs/runbooks.md", "*Confirm it.*"},
	{"docs/install.md", "Helm"},
	{"docs/install.md", "The release bundle"},
	{"docs/install.md", "The sidecar, injected"},
	{"docs/install.md", "Clusters older than 1.36"},
	{"docs/install.md", "From a checkout"},
}

// notRun are the sections of README.md and install.md with sh blocks that
// do not run here, and why.
var notRun = map[string]string{
	"README.md#Quick start":                       "`make dev` and `make test`: test/e2e runs `kvhint-dev dev`, and make test runs this test",
	"README.md#Install":                           "a release's URLs, which need the network; docs/install.md's steps run here with the same install.yaml",
	"docs/install.md#Installing kv-hint-operator": "`go install ...@v0.1.0` fetches a released module; the test builds kvhint from the checkout",
}

// TestDocsAsWritten follows README.md, docs/install.md and the confirm
// steps of docs/runbooks.md on a local control plane: kube-apiserver and
// etcd, kube-controller-manager's Deployment and ReplicaSet controllers,
// kwok's fake node, and the test's kubelet, which runs the pods'
// containers (the manager, the injected sidecar, the stand-in router) as
// processes. It reads the commands out of the Markdown, so the docs and
// the test cannot drift: the first role goes Ready, its Programmed count
// is the stand-in router's pods, and every confirm step of the runbooks
// answers.
func TestDocsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and builds kvhint; not with -short")
	}
	testenv.RequireAssets(t)
	repo, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The images' binaries.
	bin := t.TempDir()
	if _, err := testenv.Build(bin, "kvhint", "kvhint-dev"); err != nil {
		t.Fatal(err)
	}

	// The control plane, with nothing of ours installed (the docs install
	// it), kube-controller-manager's Deployment and ReplicaSet controllers
	// and kwok's fake node.
	env := testenv.Start(t, testenv.Options{Name: "tutorial", AdmitAsClusters: true, KubeControllerManager: true, Kwok: true})
	cfg, assets, kubeconfig, work := env.Config, env.Assets, env.Kubeconfig, env.Dir
	const node = controlplane.FakeNode
	kl := newKubelet(t, cfg, node, map[string]string{
		"ghcr.io/kvrouter/kvhint":     filepath.Join(bin, "kvhint"),
		"ghcr.io/kvrouter/kvhint-dev": filepath.Join(bin, "kvhint-dev"),
	})
	klDone := make(chan struct{})
	go func() { kl.run(ctx); close(klDone) }()
	defer func() { cancel(); <-klDone }()
	defer func() {
		if t.Failed() {
			t.Logf("container logs:\n%s", kl.logsOf())
		}
	}()

	// The reader's working directory: config/ of the checkout, and the
	// files the docs write or download (install.yaml, from a release; here
	// kustomize's build of config/default, which make release bundles).
	if err := os.Symlink(filepath.Join(repo, "config"), filepath.Join(work, "config")); err != nil {
		t.Fatal(err)
	}
	bundle, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(repo, "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	if err := os.WriteFile(filepath.Join(work, "install.yaml"), bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	// router.yaml likewise: config/router built, the stand-in router's
	// image left as config/router names it (the release pins its own).
	router, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(repo, "config", "router")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/router: %v", err)
	}
	if err := os.WriteFile(filepath.Join(work, "router.yaml"), router, 0o644); err != nil {
		t.Fatal(err)
	}
	// kubectl logs is served by the kubelet: the test's keeps each
	// container's output in a file, which a kubectl in front of the real
	// one reads; every other kubectl command goes to the real one.
	shim := t.TempDir()
	writeKubectlShim(t, shim, filepath.Join(assets, "kubectl"), kl.dir)
	sh := startShell(t, work, []string{
		"KUBECONFIG=" + kubeconfig, "HOME=" + work,
		"PATH=" + shim + ":" + bin + ":" + assets + ":/usr/bin:/bin",
	})
	defer sh.close()

	// What a reader's cluster has beside: a Prometheus ServiceAccount
	// allowed to scrape (alerts.md sets it up), for the runbooks' checks.
	sh.must(t, "kubectl create namespace monitoring && kubectl -n monitoring create serviceaccount prometheus && "+
		"kubectl create clusterrolebinding prometheus-kvhint-metrics --clusterrole=kvhint-metrics-reader --serviceaccount=monitoring:prometheus")

	blocks := map[string][]Block{}
	for _, f := range []string{"README.md", "docs/install.md", "docs/runbooks.md"} {
		bs, err := ReadBlocks(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		blocks[f] = bs
		for _, b := range bs {
			if b.Lang != "sh" {
				continue
			}
			known := notRun[f+"#"+b.Section] != ""
			for _, s := range sections {
				known = known || (s.file == f && inSection(b, f, s.section))
			}
			if !known {
				t.Errorf("%s:%d: an sh block under %q, a section this test neither runs nor lists in notRun", f, b.Line, b.Section)
			}
		}
	}

	ran, skipped := 0, map[string]int{}
	firstRoleReady := false
	for _, s := range sections {
		for _, b := range blocks[s.file] {
			if b.Lang == "yaml" && b.Section == s.section {
				writeNamedYAML(t, work, b)
			}
			if b.Lang != "sh" || !inSection(b, s.file, s.section) {
				continue
			}
			for _, c := range b.Commands() {
				if why := skipWhy(c.Text); why != "" {
					skipped[why]++
					t.Logf("skipped %s (%s)", c, why)
					continue
				}
				if pf, ok := strings.CutSuffix(strings.TrimSpace(c.Text), "&"); ok && strings.Contains(pf, "port-forward") {
					portForward(ctx, t, sh, kl, c, pf)
					ran++
					continue
				}
				text := c.Text
				if local := strings.ReplaceAll(text, taggedFiles, ""); local != text {
					// The release's tag of this checkout's files: the
					// checkout itself (config/ in the working directory).
					t.Logf("reading %s as the checkout's files", taggedFiles)
					text = local
				}
				out, rc := sh.run(t, text, 4*time.Minute)
				ran++
				t.Logf("ran %s\n%s", c, indent(out))
				if rc != 0 {
					t.Fatalf("%s: exit %d\n%s", c, rc, out)
				}
			}
		}
		if s.file == "README.md" && s.section == "A first role" {
			firstRoleReady = true
			checkFirstRole(t, sh)
		}
	}
	if !firstRoleReady {
		t.Fatal("README.md's first role was never checked")
	}
	t.Logf("ran %d commands; skipped %v", ran, skipped)
}

func inSection(b Block, file, section string) bool {
	if section == "*Confirm it.*" {
		// The runbooks' confirm blocks: every sh block of a section
		// named after an alert.
		return strings.HasPrefix(b.Section, "KVHint")
	}
	return b.Section == section
}

func skipWhy(cmd string) string {
	for _, s := range skips {
		if s.re.MatchString(strings.TrimSpace(cmd)) {
			return s.why
		}
	}
	return ""
}

// checkFirstRole: README's first role is Ready, and its Programmed count
// is the stand-in router's pods, every one of them running the compiled
// config.
func checkFirstRole(t *testing.T, sh *shell) {
	t.Helper()
	out := sh.must(t, `kubectl -n routers get rr llama-decode -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.routerPods.summary} {.spec.hints[*].type}'`)
	if f := strings.Fields(out); len(f) != 4 || f[0] != "True" || f[1] != "2/2" || f[2] != "kv-retain" || f[3] != "kv-evict" {
		t.Fatalf("README's first role llama-decode: Ready, Programmed, hints = %q; want True 2/2 kv-retain kv-evict", out)
	}
	hash := sh.must(t, `kubectl -n routers get configmap llama-hints -o jsonpath='{.metadata.annotations.hints\.kvrouter\.io/hash}'`)
	pods := sh.must(t, `kubectl -n routers get pods -l hints.kvrouter.io/router=llama -o jsonpath='{range .items[*]}{.spec.containers[0].image} {.spec.initContainers[0].name} {.metadata.annotations.hints\.kvrouter\.io/applied-hash}{"\n"}{end}'`)
	lines := strings.Split(strings.TrimSpace(pods), "\n")
	if len(lines) != 2 {
		t.Fatalf("router pods: %q; want 2", pods)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 3 || !strings.HasPrefix(f[0], "ghcr.io/kvrouter/kvhint-dev:") || f[1] != "kvhint" || f[2] != hash {
			t.Errorf("router pod %q: want the stand-in router's image, the injected sidecar kvhint and applied hash %s", l, hash)
		}
	}
}

// writeNamedYAML writes a yaml block whose first line is a comment naming
// a file ("# llama-decode.yaml") into the working directory, as a reader
// saves it.
func writeNamedYAML(t *testing.T, dir string, b Block) {
	t.Helper()
	if len(b.Lines) == 0 {
		return
	}
	name, ok := strings.CutPrefix(strings.TrimSpace(b.Lines[0]), "# ")
	if !ok || !strings.HasSuffix(name, ".yaml") || strings.ContainsAny(name, " /") {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(b.Lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// portForward runs `kubectl [-n NS] port-forward TARGET L:R &` as the
// kubelet's streaming would: the shell expands the words, the API server
// resolves the target to a pod, and the test forwards 127.0.0.1:L to the
// pod's address.
func portForward(ctx context.Context, t *testing.T, sh *shell, kl *kubelet, c Command, line string) {
	t.Helper()
	words := strings.Fields(sh.must(t, "set -- "+line+"; echo \"$@\""))
	ns, target, ports := "default", "", ""
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case w == "-n" && i+1 < len(words):
			ns = words[i+1]
			i++
		case w == "kubectl" || w == "port-forward":
		case target == "":
			target = w
		default:
			ports = w
		}
	}
	l, r, ok := strings.Cut(ports, ":")
	local, err := strconv.Atoi(l)
	if !ok || err != nil || target == "" {
		t.Fatalf("%s: cannot read the port-forward's target and ports from %q", c, words)
	}
	kind, name, _ := strings.Cut(target, "/")
	pod := name
	if kind != "pod" {
		pod = sh.must(t, fmt.Sprintf(`kubectl -n %s get pods -o name -l "$(kubectl -n %s get %s -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}' | sed 's/,$//')" | head -1 | cut -d/ -f2`, ns, ns, target))
	}
	var ip string
	deadline := time.Now().Add(time.Minute)
	for ip == "" && time.Now().Before(deadline) {
		ip, _ = kl.podIP(ns, strings.TrimSpace(pod))
		if ip == "" {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if ip == "" {
		t.Fatalf("%s: pod %s/%s does not run", c, ns, pod)
	}
	stop, err := forward(ctx, local, ip+":"+r)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	t.Cleanup(stop)
	t.Logf("ran %s (forwarding 127.0.0.1:%d to pod %s/%s at %s:%s)", c, local, ns, pod, ip, r)
}

// shell is one bash, as a reader's terminal: variables set by one command
// are there for the next.
type shell struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

const rcMark = "__kvhint_tutorial_rc="

func startShell(t *testing.T, dir string, env []string) *shell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = dir, env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &shell{cmd: cmd, in: in, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	if _, err := io.WriteString(in, "exec 2>&1\n"); err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs one command and returns its output and exit code.
func (s *shell) run(t *testing.T, command string, timeout time.Duration) (string, int) {
	t.Helper()
	// A newline before the mark, for output that ends without one; run
	// drops the empty line it leaves.
	if _, err := io.WriteString(s.in, command+"\nprintf '\\n"+rcMark+"%d\\n' \"$?\"\n"); err != nil {
		t.Fatal(err)
	}
	var out []string
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("the shell exited during %q:\n%s", command, strings.Join(out, "\n"))
			}
			if rc, found := strings.CutPrefix(l, rcMark); found {
				n, _ := strconv.Atoi(rc)
				if len(out) > 0 && out[len(out)-1] == "" {
					out = out[:len(out)-1]
				}
				return strings.Join(out, "\n"), n
			}
			out = append(out, l)
		case <-timer.C:
			t.Fatalf("%q did not finish within %s:\n%s", command, timeout, strings.Join(out, "\n"))
		}
	}
}

func (s *shell) must(t *testing.T, command string) string {
	t.Helper()
	out, rc := s.run(t, command, time.Minute)
	if rc != 0 {
		t.Fatalf("%s: exit %d\n%s", command, rc, out)
	}
	return strings.TrimSpace(out)
}

func (s *shell) close() {
	_, _ = io.WriteString(s.in, "kill $(jobs -p) 2>/dev/null; exit\n")
	_ = s.cmd.Wait()
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// writeKubectlShim writes dir/kubectl: `kubectl [-n NS] logs TARGET [-c
// CONTAINER] [--previous]` read from the test kubelet's log files (TARGET
// pod/NAME, NAME, or deploy/NAME for its first pod, as kubectl picks
// one), as the kubelet serves them; anything else runs the real kubectl.
// --previous answers as kubectl does for a container that never
// restarted (the test's kubelet restarts none).
func writeKubectlShim(t *testing.T, dir, real, logs string) {
	t.Helper()
	script := `#!/bin/bash
real=` + shellQuote(real) + `
logs=` + shellQuote(logs) + `
case " $* " in *" logs "*) ;; *) exec "$real" "$@";; esac
ns=default target= container= previous=
while [ $# -gt 0 ]; do
  case "$1" in
    -n|--namespace) ns=$2; shift 2;;
    -c|--container) container=$2; shift 2;;
    --previous|-p) previous=1; shift;;
    logs) shift;;
    -*) shift;;
    *) target=$1; shift;;
  esac
done
case "$target" in
  deploy/*|deployment/*)
    sel=$("$real" -n "$ns" get "$target" -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}') || exit 1
    pod=$("$real" -n "$ns" get pods -l "${sel%,}" -o name | head -1); pod=${pod#pod/};;
  pod/*) pod=${target#pod/};;
  *) pod=$target;;
esac
[ -n "$pod" ] || { echo "error: no pod for $target" >&2; exit 1; }
if [ -z "$container" ]; then
  container=$("$real" -n "$ns" get pod "$pod" -o jsonpath='{.spec.containers[0].name}') || exit 1
fi
if [ -n "$previous" ]; then
  echo "Error from server (BadRequest): previous terminated container \"$container\" in pod \"$pod\" not found" >&2
  exit 1
fi
f="$logs/${ns}_${pod}_${container}.log"
[ -f "$f" ] || { echo "Error from server (BadRequest): container \"$container\" in pod \"$pod\" is not running" >&2; exit 1; }
cat "$f"
`
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
