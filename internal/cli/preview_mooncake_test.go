package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/tracesynth"
)

// mooncakeTrace returns the path of a real Mooncake trace, read in place;
// the test skips, saying why, when the traces are absent.
func mooncakeTrace(t *testing.T, name string) string {
	t.Helper()
	dir, why := tracesynth.MooncakeDir()
	if dir == "" {
		t.Skip("real Mooncake traces absent: " + why)
	}
	return filepath.Join(dir, name)
}

// chainedConversation writes the conversation trace with the session ids
// tracesynth.ChainSessions gives it into a temporary file.
func chainedConversation(t *testing.T) string {
	t.Helper()
	in, err := os.Open(mooncakeTrace(t, "conversation_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := filepath.Join(t.TempDir(), "conversation-sessions.jsonl")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := tracesynth.ChainSessions(in, out, 512, 2); err != nil {
		t.Fatal(err)
	}
	return p
}

// withoutEvict writes config/samples' session-decode.yaml with kv-evict
// removed: the head of the kv-evict question.
func withoutEvict(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../config/samples/session-decode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, cut := range []string{
		"---\napiVersion: hints.kvrouter.io/v1alpha1\nkind: HintPolicy\nmetadata:\n  name: session-evict\nspec:\n  type: kv-evict\n",
		"  - policyRef:\n      name: session-evict\n",
	} {
		if !strings.Contains(s, cut) {
			t.Fatalf("session-decode.yaml no longer holds %q", cut)
		}
		s = strings.Replace(s, cut, "", 1)
	}
	return writeFile(t, t.TempDir(), "session-decode-no-evict.yaml", s)
}

type previewJSON struct {
	Verdict *struct {
		Word string `json:"verdict"`
	} `json:"verdict"`
	Roles []struct {
		Role string `json:"role"`
		Base struct {
			Cached int     `json:"cached_blocks"`
			Prompt int     `json:"prompt_blocks"`
			TTFT   float64 `json:"ttft_mean_ms"`
			Kept   int     `json:"evict_kept_in_use"`
		} `json:"base"`
		Head struct {
			Cached int     `json:"cached_blocks"`
			Prompt int     `json:"prompt_blocks"`
			TTFT   float64 `json:"ttft_mean_ms"`
		} `json:"head"`
	} `json:"roles"`
}

// kv-evict's sign on the conversation trace rests on the engine's
// semantics. Base is config/samples (router chat: decode with kv-retain
// and kv-evict), head the same without kv-evict, sessions chained from the
// trace's prefixes, 8 workers x 4,096 blocks of 512 tokens. Freeing blocks
// other requests read (every session shares the system-prompt block)
// costs kv-evict a large share of the prefix hits; a reference-counted
// cache keeps them, and most of the loss goes.
func TestPreviewMooncakeEvictInUse(t *testing.T) {
	tr := chainedConversation(t)
	head := withoutEvict(t)
	delta := map[string]float64{}
	for _, mode := range []string{"free", "keep"} {
		code, out, errOut := runCLI("preview", "--trace", tr, "--base", "../../config/samples", "--head", head,
			"--router", "chat", "--evict-in-use", mode, "--sensitivity=false", "-o", "json")
		if code != PreviewDiffers && code != PreviewCannotTell {
			t.Fatalf("--evict-in-use %s: exit %d\n%s", mode, code, errOut)
		}
		var r previewJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Roles) != 1 || r.Roles[0].Role != "decode" || r.Roles[0].Base.Prompt == 0 {
			t.Fatalf("--evict-in-use %s: roles %+v; want decode alone", mode, r.Roles)
		}
		d := r.Roles[0]
		// kv-evict's effect: base (with it) minus head (without it).
		delta[mode] = float64(d.Base.Cached)/float64(d.Base.Prompt) - float64(d.Head.Cached)/float64(d.Head.Prompt)
		t.Logf("--evict-in-use %s: kv-evict %+.2f pp prefix hit, TTFT mean %+.1f ms, blocks kept in use %d",
			mode, 100*delta[mode], d.Base.TTFT-d.Head.TTFT, d.Base.Kept)
		if mode == "keep" && d.Base.Kept == 0 {
			t.Errorf("--evict-in-use keep kept no block in use")
		}
	}
	if delta["free"] > -0.05 {
		t.Errorf("with in-use blocks freed, kv-evict changes the hit ratio by %+.2f pp; want a loss over 5 pp", 100*delta["free"])
	}
	if delta["keep"] < delta["free"]/4 {
		t.Errorf("reference-counted, kv-evict changes the hit ratio by %+.2f pp; want under a quarter of the %+.2f pp freeing in-use blocks costs",
			100*delta["keep"], 100*delta["free"])
	}
}

// A kv-retain TTL change on the conversation trace as published: its rows
// carry no session id, so no booking can show the change, and preview
// says so with its own exit code rather than "no difference".
func TestPreviewMooncakeRetainCannotTell(t *testing.T) {
	tr := mooncakeTrace(t, "conversation_trace.jsonl")
	data, err := os.ReadFile("../../config/samples/session-decode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	head := writeFile(t, t.TempDir(), "ttl.yaml", strings.Replace(string(data), "ttl_seconds: 600", "ttl_seconds: 120", 1))
	code, out, errOut := runCLI("preview", "--trace", tr, "--base", "../../config/samples", "--head", head, "--router", "chat")
	if code != PreviewCannotTell {
		t.Fatalf("exit %d, want %d (cannot tell)\n%s\n%s", code, PreviewCannotTell, out, errOut)
	}
	want := "0 of 12031 rows carry a session id, and kv-retain (role decode) acts only within a session"
	if !strings.Contains(errOut, want) || !strings.Contains(out, want) || !strings.HasPrefix(out, "## kvhint preview\n\n**Verdict: cannot tell.**") {
		t.Errorf("want the verdict first and the warning %q on both outputs; stdout:\n%s\nstderr:\n%s", want, out, errOut)
	}
}

// The strip and the interval on the real trace: four more settings, each
// with its own delta, and six windows of a sixth of the trace's span each.
// The prefix hit delta over the whole trace is the windows' deltas
// weighted by their prompt blocks (the same under both configs), so it
// lies within their range.
func TestPreviewMooncakeStripAndInterval(t *testing.T) {
	tr := chainedConversation(t)
	head := withoutEvict(t)
	code, out, errOut := runCLI("preview", "--trace", tr, "--base", "../../config/samples", "--head", head, "--router", "chat", "-o", "json")
	if code != PreviewDiffers && code != PreviewCannotTell {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var r struct {
		Verdict struct {
			Word    string   `json:"verdict"`
			Reasons []string `json:"reasons"`
		} `json:"verdict"`
		Trace struct {
			SpanS float64 `json:"span_s"`
		} `json:"trace"`
		Headline struct {
			HitPP float64 `json:"prefix_hit_pp"`
		} `json:"headline"`
		Sensitivity []struct {
			Name     string `json:"name"`
			Headline struct {
				HitPP float64 `json:"prefix_hit_pp"`
			} `json:"headline"`
			Direction string `json:"direction"`
		} `json:"sensitivity"`
		Interval *struct {
			Windows  int     `json:"windows"`
			WidthS   float64 `json:"width_s"`
			HitPPMin float64 `json:"prefix_hit_pp_min"`
			HitPPMax float64 `json:"prefix_hit_pp_max"`
		} `json:"interval"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Sensitivity) != 4 {
		t.Fatalf("strip %+v; want 4 settings", r.Sensitivity)
	}
	seen := map[float64]bool{r.Headline.HitPP: true}
	for _, v := range r.Sensitivity {
		seen[v.Headline.HitPP] = true
		t.Logf("%s: %+.2f pp, %s", v.Name, v.Headline.HitPP, v.Direction)
	}
	if len(seen) != 5 {
		t.Errorf("the strip repeats a delta: %+v", r.Sensitivity)
	}
	iv := r.Interval
	if iv == nil || iv.Windows != 6 || iv.WidthS < r.Trace.SpanS/6-1 || iv.WidthS > r.Trace.SpanS/6+1 {
		t.Fatalf("interval %+v; want 6 windows of %.0f s", iv, r.Trace.SpanS/6)
	}
	if r.Headline.HitPP < iv.HitPPMin-1e-9 || r.Headline.HitPP > iv.HitPPMax+1e-9 {
		t.Errorf("headline %+.3f pp outside the windows' %+.3f to %+.3f pp", r.Headline.HitPP, iv.HitPPMin, iv.HitPPMax)
	}
	t.Logf("headline %+.2f pp, windows %+.2f to %+.2f pp; verdict %s %v", r.Headline.HitPP, iv.HitPPMin, iv.HitPPMax, r.Verdict.Word, r.Verdict.Reasons)
	spans := iv.HitPPMin < 0 && iv.HitPPMax > 0
	if spans && r.Verdict.Word != "cannot tell" {
		t.Errorf("the interval spans zero but the verdict is %q", r.Verdict.Word)
	}
}

// Engine blocks apart from trace blocks, on the real trace: kv-fetch's
// min_blocks counts engine blocks. At 512-token engine blocks (the
// trace's), lowering it from 4 to 1 adds kv.fetch to bookings; at 16-token
// engine blocks every copy of a 512-token id is 32 engine blocks, already
// over 4, and nothing changes. The cache is the same in tokens both times.
func TestPreviewMooncakeEngineBlocks(t *testing.T) {
	tr := mooncakeTrace(t, "conversation_trace.jsonl")
	data, err := os.ReadFile("../../config/samples/disaggregated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "min_blocks: 4") {
		t.Fatal("disaggregated.yaml no longer sets min_blocks: 4")
	}
	head := writeFile(t, t.TempDir(), "min1.yaml", strings.Replace(string(data), "min_blocks: 4", "min_blocks: 1", 1))
	run := func(engine string) (int, string) {
		code, out, errOut := runCLI("preview", "--trace", tr, "--base", "../../config/samples", "--head", head, "--router", "llama",
			"--engine-block-size", engine, "--cache-tokens", "2097152", "--sensitivity=false")
		if code == PreviewError {
			t.Fatalf("--engine-block-size %s: %s", engine, errOut)
		}
		return code, out
	}
	code, out := run("512")
	var b, h int
	if i := strings.Index(out, "| bookings with kv.fetch | "); i >= 0 {
		fmt.Sscanf(out[i:], "| bookings with kv.fetch | %d | %d |", &b, &h)
	}
	if code == PreviewSame || h <= b {
		t.Errorf("at 512-token engine blocks: exit %d, kv.fetch on %d then %d bookings; want more:\n%s", code, b, h, out)
	}
	t.Logf("at 512-token engine blocks, kv.fetch on %d then %d bookings", b, h)
	code, out = run("16")
	if code != PreviewSame || !strings.Contains(out, "x 131072 blocks of 16 tokens (2097152 tokens a worker)") {
		t.Errorf("at 16-token engine blocks: exit %d; want no difference, the cache printed in engine blocks and tokens:\n%s", code, out)
	}
}

// TestPreviewDocsHead: the head docs/preview.md's worked example has its
// reader save is the file this package's tests run as that head.
func TestPreviewDocsHead(t *testing.T) {
	doc, err := os.ReadFile("../../docs/preview.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "`session-decode-no-evict.yaml`:\n\n```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("docs/preview.md has no yaml block after \"`session-decode-no-evict.yaml`:\"")
	}
	data, err := os.ReadFile(withoutEvict(t))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if want := strings.Join(lines, ""); block != want {
		t.Errorf("docs/preview.md's session-decode-no-evict.yaml:\n%s\nwant config/samples/session-decode.yaml without kv-evict:\n%s", block, want)
	}
}
