package preview

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// The verdict words.
const (
	VerdictImproves     = "improves"
	VerdictWorsens      = "worsens"
	VerdictCannotTell   = "cannot tell"
	VerdictNoDifference = "no difference"
)

// TraceInfo is the trace's identity and shape.
type TraceInfo struct {
	// Path is where it was read from (set by the caller).
	Path   string `json:"path,omitempty"`
	SHA256 string `json:"sha256"`
	Rows   int    `json:"rows"`
	// SpanS is the time from the first arrival to the last, seconds;
	// RatePerS the rows a second over it.
	SpanS    float64 `json:"span_s"`
	RatePerS float64 `json:"rate_per_s"`
	// MeanInputTokens and MeanOutputTokens are the mean ISL and OSL.
	MeanInputTokens  float64 `json:"mean_input_tokens"`
	MeanOutputTokens float64 `json:"mean_output_tokens"`
	// WithSession counts the rows that carry a session_id.
	WithSession int `json:"rows_with_session"`
	// InfiniteCacheHit bounds every config's prefix hit ratio: the share
	// of the prompt blocks of rows with hash_ids whose prefix an earlier
	// row already held, as one cache of unlimited size would serve them.
	InfiniteCacheHit float64 `json:"infinite_cache_hit_ratio"`
}

// Headline is the change in the figures the verdict reads: the prefix
// hit ratio over every role's bookings, in percentage points, and the
// mean TTFT estimate of the headline role.
type Headline struct {
	HitPP   float64 `json:"prefix_hit_pp"`
	TTFTMS  float64 `json:"ttft_mean_ms"`
	TTFTPct float64 `json:"ttft_mean_pct"`
}

// Variant is the change at other workers and cache sizes.
type Variant struct {
	Name        string   `json:"name"`
	Workers     float64  `json:"workers_factor"`
	CacheBlocks float64  `json:"cache_factor"`
	Headline    Headline `json:"headline"`
	Direction   string   `json:"direction"`
}

// Interval is the range of the headline deltas over time windows of the
// trace, each computed from the bookings that arrived in it.
type Interval struct {
	Windows    int     `json:"windows"`
	WidthS     float64 `json:"width_s"`
	HitPPMin   float64 `json:"prefix_hit_pp_min"`
	HitPPMax   float64 `json:"prefix_hit_pp_max"`
	TTFTPctMin float64 `json:"ttft_mean_pct_min"`
	TTFTPctMax float64 `json:"ttft_mean_pct_max"`
	// ByWindow are the deltas of each window that had bookings.
	ByWindow []WindowDelta `json:"by_window"`
}

// WindowDelta is one window's headline deltas.
type WindowDelta struct {
	Index   int     `json:"index"`
	HitPP   float64 `json:"prefix_hit_pp"`
	TTFTPct float64 `json:"ttft_mean_pct"`
}

// Verdict is the report's one line: a word and why.
type Verdict struct {
	Word    string   `json:"verdict"`
	Role    string   `json:"ttft_role,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
}

// headline reads the headline deltas of two replays.
func headline(base, head *Result) Headline {
	var pb, cb, ph, ch int
	for _, s := range base.Roles {
		pb, cb = pb+s.PromptBlocks, cb+s.CachedBlocks
	}
	for _, s := range head.Roles {
		ph, ch = ph+s.PromptBlocks, ch+s.CachedBlocks
	}
	h := Headline{HitPP: 100 * (ratio(ch, ph) - ratio(cb, pb))}
	if eb, eh := base.EndToEnd, head.EndToEnd; eb != nil && eh != nil {
		h.TTFTMS = eh.MeanMS - eb.MeanMS
		if eb.MeanMS > 0 {
			h.TTFTPct = 100 * h.TTFTMS / eb.MeanMS
		}
	} else if sb, sh := base.Roles[base.Headline], head.Roles[head.Headline]; sb != nil && sh != nil {
		h.TTFTMS = sh.TTFTMeanMS - sb.TTFTMeanMS
		if sb.TTFTMeanMS > 0 {
			h.TTFTPct = 100 * h.TTFTMS / sb.TTFTMeanMS
		}
	}
	return h
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Tolerances under which a headline delta counts as no change.
const (
	hitTolPP   = 0.01
	ttftTolPct = 0.1
)

func sign(v, tol float64) int {
	switch {
	case v > tol:
		return 1
	case v < -tol:
		return -1
	}
	return 0
}

// direction is improves, worsens, "no change" (neither figure moves) or
// "mixed" (they move apart).
func (h Headline) direction() string {
	hs, ts := sign(h.HitPP, hitTolPP), -sign(h.TTFTPct, ttftTolPct)
	switch {
	case hs == 0 && ts == 0:
		return "no change"
	case hs >= 0 && ts >= 0:
		return VerdictImproves
	case hs <= 0 && ts <= 0:
		return VerdictWorsens
	}
	return "mixed"
}

func (h Headline) String() string {
	return fmt.Sprintf("prefix hit %+.2f pp, TTFT mean %+.1f ms (%+.1f%%)", h.HitPP, h.TTFTMS, h.TTFTPct)
}

// interval reads the window deltas of two replays.
func interval(base, head *Result, info TraceInfo) *Interval {
	k := len(base.Windows)
	if k < 2 || len(head.Windows) != k || info.SpanS <= 0 {
		return nil
	}
	iv := &Interval{Windows: k, WidthS: info.SpanS / float64(k),
		HitPPMin: math.Inf(1), HitPPMax: math.Inf(-1), TTFTPctMin: math.Inf(1), TTFTPctMax: math.Inf(-1)}
	n := 0
	for i := range k {
		b, h := base.Windows[i], head.Windows[i]
		if b.PromptBlocks == 0 || h.PromptBlocks == 0 {
			continue
		}
		n++
		d := 100 * (ratio(h.CachedBlocks, h.PromptBlocks) - ratio(b.CachedBlocks, b.PromptBlocks))
		iv.HitPPMin, iv.HitPPMax = min(iv.HitPPMin, d), max(iv.HitPPMax, d)
		wd := WindowDelta{Index: i, HitPP: d}
		if b.TTFTCount > 0 && h.TTFTCount > 0 && b.TTFTSumMS > 0 {
			mb, mh := b.TTFTSumMS/float64(b.TTFTCount), h.TTFTSumMS/float64(h.TTFTCount)
			p := 100 * (mh - mb) / mb
			iv.TTFTPctMin, iv.TTFTPctMax = min(iv.TTFTPctMin, p), max(iv.TTFTPctMax, p)
			wd.TTFTPct = p
		}
		iv.ByWindow = append(iv.ByWindow, wd)
	}
	if n < 2 {
		return nil
	}
	if math.IsInf(iv.TTFTPctMin, 0) {
		iv.TTFTPctMin, iv.TTFTPctMax = 0, 0
	}
	return iv
}

// traceInfo reads the trace's shape.
func traceInfo(rows []Row, sum []byte) TraceInfo {
	info := TraceInfo{SHA256: hex.EncodeToString(sum), Rows: len(rows)}
	if len(rows) == 0 {
		return info
	}
	var in, out int64
	seen := map[uint64]bool{}
	var prompt, cached int
	for i := range rows {
		r := &rows[i]
		in += int64(r.InputTokens)
		out += int64(r.OutputTokens)
		if r.Session != "" {
			info.WithSession++
		}
		if r.Hashes != nil {
			n := 0
			for n < len(r.Hashes) && seen[r.Hashes[n]] {
				n++
			}
			for _, h := range r.Hashes[n:] {
				seen[h] = true
			}
			prompt += len(r.Hashes)
			cached += n
		}
	}
	info.SpanS = (rows[len(rows)-1].At - rows[0].At) / 1000
	if info.SpanS > 0 {
		info.RatePerS = float64(len(rows)) / info.SpanS
	}
	info.MeanInputTokens = float64(in) / float64(len(rows))
	info.MeanOutputTokens = float64(out) / float64(len(rows))
	info.InfiniteCacheHit = ratio(cached, prompt)
	return info
}

// sessionHints are the hint types that act only within a session.
var sessionHints = map[string]bool{builtin.TypeKVRetain: true, builtin.TypeKVEvict: true}

// changedHints returns, per role, the hint types whose instances differ
// between the two configs (added, removed, or other parameters).
func changedHints(cat *hints.Catalog, base, head Config) (map[string][]string, error) {
	graphs := [2]map[string]map[string][]string{}
	for i, c := range []Config{base, head} {
		parsed, err := hintsconfig.ParseConfig(c.Doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		g, probs := hintsconfig.Compile(cat, parsed, c.Modes)
		if probs.HasErrors() {
			return nil, fmt.Errorf("%s: %w", c.Name, probs.Errors())
		}
		graphs[i] = map[string]map[string][]string{}
		for _, r := range g.Roles {
			m := map[string][]string{}
			for _, h := range r.Hints {
				m[h.Type] = append(m[h.Type], h.Name+" "+string(h.Params))
			}
			graphs[i][r.Name] = m
		}
	}
	out := map[string][]string{}
	roles := map[string]bool{}
	for i := range graphs {
		for r := range graphs[i] {
			roles[r] = true
		}
	}
	for r := range roles {
		types := map[string]bool{}
		for i := range graphs {
			for t := range graphs[i][r] {
				types[t] = true
			}
		}
		for _, t := range slices.Sorted(maps.Keys(types)) {
			if !slices.Equal(graphs[0][r][t], graphs[1][r][t]) {
				out[r] = append(out[r], t)
			}
		}
	}
	return out, nil
}

// unexercised names the hint changes no row of the trace can exercise.
func unexercised(changed map[string][]string, info TraceInfo, base, head *Result) []string {
	if info.Rows == 0 {
		return []string{"the trace is empty: no booking can show the change"}
	}
	var out []string
	for _, role := range slices.Sorted(maps.Keys(changed)) {
		types := changed[role]
		sb, sh := base.Roles[role], head.Roles[role]
		if (sb == nil || sb.Bookings == 0) && (sh == nil || sh.Bookings == 0) {
			out = append(out, fmt.Sprintf("role %s got 0 bookings from the trace, so its change to %s cannot act", role, strings.Join(types, ", ")))
			continue
		}
		var sess []string
		for _, t := range types {
			if sessionHints[t] {
				sess = append(sess, t)
			}
		}
		if len(sess) > 0 && info.WithSession == 0 {
			out = append(out, fmt.Sprintf("0 of %d rows carry a session id, and %s (role %s) acts only within a session; give the trace session_id (see docs/preview.md, Traces)",
				info.Rows, strings.Join(sess, " and "), role))
		}
	}
	return out
}

// decide gives the verdict.
func (r *Report) decide(warnings []string) {
	v := Verdict{Role: r.headlineRole}
	dir := r.Headline.direction()
	switch {
	case len(warnings) > 0:
		v.Word, v.Reasons = VerdictCannotTell, warnings
	case !r.Differs:
		v.Word = VerdictNoDifference
	case dir == "mixed":
		v.Word = VerdictCannotTell
		v.Reasons = append(v.Reasons, "the prefix hit ratio and the TTFT move in opposite directions: "+r.Headline.String())
	case dir == "no change":
		v.Word = VerdictCannotTell
		v.Reasons = append(v.Reasons, "bookings change but neither the prefix hit ratio nor the TTFT moves beyond the tolerance (0.01 pp, 0.1%)")
	default:
		v.Word = dir
		for _, x := range r.Sensitivity {
			if x.Direction != dir {
				v.Reasons = append(v.Reasons, fmt.Sprintf("at %s the change %s (%s)", x.Name, x.Direction, x.Headline))
			}
		}
		if iv := r.Interval; iv != nil {
			if sign(r.Headline.HitPP, hitTolPP) != 0 && iv.HitPPMin < 0 && iv.HitPPMax > 0 {
				v.Reasons = append(v.Reasons, fmt.Sprintf("the prefix hit delta spans zero over the %d windows (%+.2f to %+.2f pp)", iv.Windows, iv.HitPPMin, iv.HitPPMax))
			}
			if sign(r.Headline.TTFTPct, ttftTolPct) != 0 && iv.TTFTPctMin < 0 && iv.TTFTPctMax > 0 {
				v.Reasons = append(v.Reasons, fmt.Sprintf("the TTFT delta spans zero over the %d windows (%+.1f%% to %+.1f%%)", iv.Windows, iv.TTFTPctMin, iv.TTFTPctMax))
			}
		}
		if len(v.Reasons) > 0 {
			v.Word = VerdictCannotTell
		}
	}
	r.Verdict = v
}

// scaled is a with every role's workers and cache scaled.
func scaled(a Assumptions, wf, cf float64) Assumptions {
	sc := func(v int, f float64) int {
		if v == 0 {
			return 0
		}
		return max(1, int(math.Round(float64(v)*f)))
	}
	t := Topology{Default: a.Topology.Default}
	t.Default.Workers, t.Default.CacheBlocks = sc(t.Default.Workers, wf), sc(t.Default.CacheBlocks, cf)
	if a.Topology.Roles != nil {
		t.Roles = map[string]RoleTopology{}
		for n, r := range a.Topology.Roles {
			r.Workers, r.CacheBlocks = sc(r.Workers, wf), sc(r.CacheBlocks, cf)
			t.Roles[n] = r
		}
	}
	a.Topology = t
	a.Windows = 0
	return a
}

// newHasher is the trace digest.
var newHasher = sha256.New
