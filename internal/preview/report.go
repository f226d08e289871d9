package preview

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// MaxExamples is how many changed bookings a role's report lists.
const MaxExamples = 5

// Report is base against head, per role.
type Report struct {
	// Verdict comes first: improves, worsens, cannot tell (and why), or
	// no difference.
	Verdict     Verdict   `json:"verdict"`
	Base        string    `json:"base"`
	Head        string    `json:"head"`
	Rows        int       `json:"trace_rows"`
	Trace       TraceInfo `json:"trace"`
	Headline    Headline  `json:"headline"`
	Sensitivity []Variant `json:"sensitivity,omitempty"`
	Interval    *Interval `json:"interval,omitempty"`
	// EndToEnd is the end-to-end TTFT of a disaggregated router, base
	// and head.
	EndToEnd    *EndToEnd    `json:"end_to_end_ttft,omitempty"`
	Assumptions Assumptions  `json:"assumptions"`
	Roles       []RoleReport `json:"roles"`
	// Differs is set when any figure or any booking's actions differ.
	Differs bool `json:"differs"`

	headlineRole string
}

// RoleReport is one role's figures under both configs and the bookings
// whose actions changed.
type RoleReport struct {
	Role     string     `json:"role"`
	Base     *RoleStats `json:"base,omitempty"`
	Head     *RoleStats `json:"head,omitempty"`
	Changed  int        `json:"changed_bookings"`
	Examples []Change   `json:"examples,omitempty"`
}

// Change is one booking whose actions differ, and what it got under
// each config.
type Change struct {
	RequestID  string   `json:"request_id"`
	Base       []string `json:"base"`
	Head       []string `json:"head"`
	CachedBase int      `json:"cached_blocks_base"`
	CachedHead int      `json:"cached_blocks_head"`
	TTFTBaseMS float64  `json:"ttft_base_ms"`
	TTFTHeadMS float64  `json:"ttft_head_ms"`
}

// impact orders examples: the largest TTFT change first.
func (c Change) impact() float64 { return math.Abs(c.TTFTHeadMS - c.TTFTBaseMS) }

// EndToEnd is the end-to-end TTFT under both configs.
type EndToEnd struct {
	Base *TTFTStats `json:"base"`
	Head *TTFTStats `json:"head"`
}

// Compare builds the report of two replays of the same trace.
func Compare(baseName, headName string, rows int, a Assumptions, base, head *Result) *Report {
	r := &Report{Base: baseName, Head: headName, Rows: rows, Assumptions: a}
	if base.EndToEnd != nil && head.EndToEnd != nil {
		r.EndToEnd = &EndToEnd{Base: base.EndToEnd, Head: head.EndToEnd}
	}
	roles := map[string]bool{}
	for n := range base.Roles {
		roles[n] = true
	}
	for n := range head.Roles {
		roles[n] = true
	}
	type key struct{ id, role string }
	headActs := make(map[key]*BookingActions, len(head.Bookings))
	for i := range head.Bookings {
		b := &head.Bookings[i]
		headActs[key{b.RequestID, b.Role}] = b
	}
	byRole := map[string]*RoleReport{}
	for _, n := range slices.Sorted(maps.Keys(roles)) {
		rr := RoleReport{Role: n, Base: base.Roles[n], Head: head.Roles[n]}
		r.Roles = append(r.Roles, rr)
	}
	for i := range r.Roles {
		byRole[r.Roles[i].Role] = &r.Roles[i]
	}
	for _, b := range base.Bookings {
		h := headActs[key{b.RequestID, b.Role}]
		if h != nil && slices.Equal(b.Actions, h.Actions) {
			continue
		}
		rr := byRole[b.Role]
		rr.Changed++
		c := Change{RequestID: b.RequestID, Base: nonNil(b.Actions), Head: []string{}, CachedBase: b.CachedBlocks, TTFTBaseMS: b.TTFTMS}
		if h != nil {
			c.Head, c.CachedHead, c.TTFTHeadMS = nonNil(h.Actions), h.CachedBlocks, h.TTFTMS
		}
		rr.Examples = keepTop(rr.Examples, c)
	}
	for i := range r.Roles {
		rr := &r.Roles[i]
		if rr.Changed > 0 || !sameStats(rr.Base, rr.Head) {
			r.Differs = true
		}
	}
	return r
}

// keepTop adds c to the examples, keeping the MaxExamples of largest
// impact, the earlier booking first among equals.
func keepTop(ex []Change, c Change) []Change {
	i := sort.Search(len(ex), func(i int) bool { return ex[i].impact() < c.impact() })
	if i >= MaxExamples {
		return ex
	}
	ex = slices.Insert(ex, i, c)
	if len(ex) > MaxExamples {
		ex = ex[:MaxExamples]
	}
	return ex
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func sameStats(a, b *RoleStats) bool {
	if a == nil || b == nil {
		return a == b
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// WriteJSON writes the report as indented JSON (keys in a fixed order).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report for a pull request comment.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## kvhint preview\n\n")
	r.writeVerdict(&b)
	fmt.Fprintf(&b, "- base: %s\n- head: %s\n\n", mdCode(r.Base), mdCode(r.Head))
	r.writeTrace(&b)
	r.writeSensitivity(&b)
	r.writeEndToEnd(&b)
	r.writeAssumptions(&b)
	for _, rr := range r.Roles {
		// Role names are the config's, which validation holds to names.
		fmt.Fprintf(&b, "### Role %s\n\n", rr.Role)
		fmt.Fprintf(&b, "| | base | head | change |\n|---|---:|---:|---:|\n")
		for _, m := range metrics(rr) {
			if m.zero {
				continue // zero under both configs
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", m.name, m.base, m.head, m.delta)
		}
		fmt.Fprintf(&b, "\n%d bookings changed their actions.\n", rr.Changed)
		if len(rr.Examples) > 0 {
			fmt.Fprintf(&b, "\nThe %d with the largest TTFT change:\n\n| request | base actions | head actions | cached blocks | TTFT (ms) |\n|---|---|---|---:|---:|\n", len(rr.Examples))
			for _, c := range rr.Examples {
				fmt.Fprintf(&b, "| %s | %s | %s | %d -> %d | %.1f -> %.1f |\n", mdCode(c.RequestID), actionList(c.Base), actionList(c.Head),
					c.CachedBase, c.CachedHead, c.TTFTBaseMS, c.TTFTHeadMS)
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeVerdict writes the one line a reader needs, and why when it
// cannot tell.
func (r *Report) writeVerdict(b *strings.Builder) {
	v := r.Verdict
	switch v.Word {
	case VerdictNoDifference:
		fmt.Fprintf(b, "**Verdict: no difference** on this trace (%d rows): no figure and no booking's actions change.\n\n", r.Rows)
		return
	case VerdictCannotTell:
		fmt.Fprintf(b, "**Verdict: cannot tell.** %s.\n", r.Headline)
		for _, why := range v.Reasons {
			fmt.Fprintf(b, "- %s\n", why)
		}
		b.WriteString("\n")
		return
	}
	ttftOf := "TTFT of role " + v.Role
	if r.EndToEnd != nil {
		ttftOf = "end-to-end TTFT"
	}
	fmt.Fprintf(b, "**Verdict: %s.** %s (%s)", v.Word, r.Headline, ttftOf)
	var held []string
	if len(r.Sensitivity) > 0 {
		held = append(held, fmt.Sprintf("at each of %d other worker and cache sizes", len(r.Sensitivity)))
	}
	if iv := r.Interval; iv != nil {
		held = append(held, fmt.Sprintf("in each of %d time windows", iv.Windows))
	}
	if len(held) > 0 {
		fmt.Fprintf(b, "; the same sign %s", strings.Join(held, " and "))
	}
	if len(r.Sensitivity) == 0 {
		b.WriteString("; sensitivity to workers and cache not run")
	}
	b.WriteString(".\n\n")
}

// writeEndToEnd writes a disaggregated router's end-to-end TTFT.
func (r *Report) writeEndToEnd(b *strings.Builder) {
	e := r.EndToEnd
	if e == nil {
		return
	}
	fmt.Fprintf(b, "### End-to-end TTFT (prefill, then decode's fetch or recompute, then the first token; ms, estimate)\n\n| | base | head | change |\n|---|---:|---:|---:|\n")
	for _, m := range []struct {
		name string
		f    func(*TTFTStats) float64
	}{{"mean", func(t *TTFTStats) float64 { return t.MeanMS }}, {"p50", func(t *TTFTStats) float64 { return t.P50MS }},
		{"p90", func(t *TTFTStats) float64 { return t.P90MS }}, {"p99", func(t *TTFTStats) float64 { return t.P99MS }}} {
		bv, hv := m.f(e.Base), m.f(e.Head)
		fmt.Fprintf(b, "| %s | %.1f | %.1f | %+.1f |\n", m.name, bv, hv, hv-bv)
	}
	b.WriteString("\n")
}

// writeTrace writes the trace's identity and shape.
func (r *Report) writeTrace(b *strings.Builder) {
	t := r.Trace
	fmt.Fprintf(b, "### Trace\n\n")
	if t.Path != "" {
		fmt.Fprintf(b, "- %s, sha256 %s\n", mdCode(t.Path), mdCode(t.SHA256))
	} else {
		fmt.Fprintf(b, "- sha256 %s\n", mdCode(t.SHA256))
	}
	fmt.Fprintf(b, "- %d rows over %.0f s (%.2f rows/s); mean input %.0f tokens, mean output %.0f tokens; %d rows carry a session id\n",
		t.Rows, t.SpanS, t.RatePerS, t.MeanInputTokens, t.MeanOutputTokens, t.WithSession)
	fmt.Fprintf(b, "- infinite-cache bound on the prefix hit ratio: %.4f\n\n", t.InfiniteCacheHit)
}

// writeSensitivity writes the strip of signs and the window interval.
func (r *Report) writeSensitivity(b *strings.Builder) {
	if !r.Differs || len(r.Sensitivity) == 0 && r.Interval == nil {
		return
	}
	fmt.Fprintf(b, "### Sensitivity\n\n| setting | prefix hit | TTFT mean | direction |\n|---|---:|---:|---|\n")
	fmt.Fprintf(b, "| as given | %+.2f pp | %+.1f ms (%+.1f%%) | %s |\n", r.Headline.HitPP, r.Headline.TTFTMS, r.Headline.TTFTPct, r.Headline.direction())
	for _, v := range r.Sensitivity {
		fmt.Fprintf(b, "| %s | %+.2f pp | %+.1f ms (%+.1f%%) | %s |\n", v.Name, v.Headline.HitPP, v.Headline.TTFTMS, v.Headline.TTFTPct, v.Direction)
	}
	if iv := r.Interval; iv != nil {
		fmt.Fprintf(b, "\nOver %d windows of %.0f s each (bookings by arrival): prefix hit %+.2f to %+.2f pp, TTFT mean %+.1f%% to %+.1f%%.\n",
			iv.Windows, iv.WidthS, iv.HitPPMin, iv.HitPPMax, iv.TTFTPctMin, iv.TTFTPctMax)
	}
	b.WriteString("\n")
}

// writeAssumptions writes the model's choices, always shown: each one
// can change a verdict's sign.
func (r *Report) writeAssumptions(b *strings.Builder) {
	fmt.Fprintf(b, "### Assumptions\n\n")
	for _, line := range r.AssumptionLines() {
		fmt.Fprintf(b, "- %s\n", line)
	}
	b.WriteString("\n")
}

// AssumptionLines are the model's assumptions, one sentence each, as the
// report states them.
func (r *Report) AssumptionLines() []string {
	a := r.Assumptions
	var out []string
	switch a.EvictInUse {
	case EvictFree:
		out = append(out, "kv.evict frees every block it names, even one another active request on the worker is reading (--evict-in-use free)")
	case EvictOracle:
		out = append(out, "an upper bound on kv.evict: reference-counted, and kv.evict also leaves every block a later row of the trace reads, as if each session's final turn shared nothing with the rows after it (--evict-in-use oracle; not an engine)")
	default:
		out = append(out, "reference-counted prefix cache, as vLLM and SGLang: a block an active request reads is neither replaced nor freed by kv.evict until it completes (--evict-in-use keep)")
	}
	ebs := a.EngineBlockSize
	if ebs == 0 {
		ebs = a.BlockSize
	}
	if ebs == a.BlockSize {
		out = append(out, fmt.Sprintf("block size %d tokens, the trace's (one hash id a block) and the engine's (bookings, min_blocks, max_blocks, cache)", a.BlockSize))
	} else {
		out = append(out, fmt.Sprintf("engine blocks of %d tokens (bookings, min_blocks, max_blocks, cache) apart from the trace's hash ids of %d tokens: each id is a run of %d engine blocks, cached, fetched and evicted together",
			ebs, a.BlockSize, a.BlockSize/ebs))
	}
	var roles []string
	for _, rr := range r.Roles {
		roles = append(roles, rr.Role)
	}
	if a.RecordedChoices {
		out = append(out, fmt.Sprintf("workers and committed copies: as recorded in the trace; caches %d engine blocks a worker", a.Topology.Default.CacheBlocks))
	} else {
		out = append(out, "topology: "+a.Topology.describe(roles, ebs))
	}
	out = append(out,
		"kv.fetch lands before the prefill that reads it: a fetched block is never late, so none is wasted by arriving after use",
		fmt.Sprintf("TTFT estimate: prefill queue wait + %g ms per computed prompt token + %g ms per fetched block; one prompt at a time a worker", a.PrefillMSPerToken, a.FetchMSPerBlock),
		"a decode role's bookings are modelled as prefills on the decode worker: its TTFT is the time to fetch or recompute what its cache lacks; with prefill and decode roles, the end-to-end TTFT adds the prefill's TTFT and one output token",
		fmt.Sprintf("completion (when kv.retain and kv.evict run): + %g ms per output token (decode and aggregated roles)", a.DecodeMSPerToken),
		fmt.Sprintf("seed %d", a.Seed))
	return out
}

func actionList(a []string) string {
	if len(a) == 0 {
		return "(none)"
	}
	return strings.Join(a, ", ")
}

// mdCode writes a string the trace or the command line gave as a Markdown
// code span a table cell holds, so that it renders as itself: no heading,
// mention, link, HTML (comments included) or new table row. The fence is
// one backtick longer than the longest run in the string; line breaks and
// other control characters become spaces, since a span cannot hold them
// in a table; a pipe is escaped, as GitHub's tables read it even in code.
func mdCode(s string) string {
	var b strings.Builder
	run, longest := 0, 0
	for _, c := range s {
		switch {
		case c == '`':
			run++
			longest = max(longest, run)
			b.WriteRune(c)
			continue
		case c < 0x20 || c == 0x7f || c == 0x2028 || c == 0x2029:
			b.WriteByte(' ')
		case c == '|':
			b.WriteString(`\|`)
		default:
			b.WriteRune(c)
		}
		run = 0
	}
	body := b.String()
	fence := strings.Repeat("`", longest+1)
	// A span that starts or ends with a backtick needs a space between it
	// and the fence (which the reader strips).
	if strings.HasPrefix(body, "`") || strings.HasSuffix(body, "`") || body == "" {
		body = " " + body + " "
	}
	return fence + body + fence
}

type metric struct {
	name, base, head, delta string
	zero                    bool
}

// metrics are a role's figures, in report order.
func metrics(rr RoleReport) []metric {
	get := func(s *RoleStats, f func(*RoleStats) float64) (float64, bool) {
		if s == nil {
			return 0, false
		}
		return f(s), true
	}
	var out []metric
	add := func(name string, f func(*RoleStats) float64, format string) {
		b, okb := get(rr.Base, f)
		h, okh := get(rr.Head, f)
		m := metric{name: name, base: "-", head: "-", delta: ""}
		if okb {
			m.base = fmt.Sprintf(format, b)
		}
		if okh {
			m.head = fmt.Sprintf(format, h)
		}
		if okb && okh && m.base != m.head {
			m.delta = fmt.Sprintf("%+"+format[1:], h-b)
		}
		m.zero = b == 0 && h == 0
		out = append(out, m)
	}
	i := func(f func(*RoleStats) int) func(*RoleStats) float64 {
		return func(s *RoleStats) float64 { return float64(f(s)) }
	}
	add("bookings", i(func(s *RoleStats) int { return s.Bookings }), "%.0f")
	add("bookings hinted", i(func(s *RoleStats) int { return s.Hinted }), "%.0f")
	types := map[string]bool{}
	for _, s := range []*RoleStats{rr.Base, rr.Head} {
		if s != nil {
			for t := range s.WithAction {
				types[t] = true
			}
		}
	}
	for _, t := range slices.Sorted(maps.Keys(types)) {
		add("bookings with "+t, i(func(s *RoleStats) int { return s.WithAction[t] }), "%.0f")
	}
	add("KV copies committed", i(func(s *RoleStats) int { return s.CopiesCommitted }), "%.0f")
	from := map[string]bool{}
	for _, s := range []*RoleStats{rr.Base, rr.Head} {
		if s != nil {
			for r := range s.CopiesFrom {
				from[r] = true
			}
		}
	}
	for _, src := range slices.Sorted(maps.Keys(from)) {
		add("- from role "+src, i(func(s *RoleStats) int { return s.CopiesFrom[src] }), "%.0f")
	}
	add("KV copies dropped (no source endpoint)", i(func(s *RoleStats) int { return s.CopiesDropped }), "%.0f")
	add("fetched blocks", i(func(s *RoleStats) int { return s.FetchedBlocks }), "%.0f")
	add("fetched blocks used", i(func(s *RoleStats) int { return s.FetchedUsed }), "%.0f")
	add("fetched blocks not used (not on the source, already cached, or never read)", i(func(s *RoleStats) int { return s.FetchedWasted }), "%.0f")
	add("prefix hit ratio (cached / prompt blocks)", func(s *RoleStats) float64 { return s.HitRatio() }, "%.4f")
	add("cached blocks", i(func(s *RoleStats) int { return s.CachedBlocks }), "%.0f")
	add("prompt blocks", i(func(s *RoleStats) int { return s.PromptBlocks }), "%.0f")
	add("prefill tokens computed", func(s *RoleStats) float64 { return float64(s.PrefillTokens) }, "%.0f")
	add("retained blocks (retentions)", i(func(s *RoleStats) int { return s.RetainedBlocks }), "%.0f")
	add("- read while retained (not counterfactual: some were cached anyway)", i(func(s *RoleStats) int { return s.RetainedReused }), "%.0f")
	add("- never read while retained", i(func(s *RoleStats) int { return s.RetainedExpiredUnused }), "%.0f")
	add("evicted blocks", i(func(s *RoleStats) int { return s.EvictedBlocks }), "%.0f")
	add("evicted blocks asked for again", i(func(s *RoleStats) int { return s.EvictedAskedAgain }), "%.0f")
	add("evicted blocks kept (in use by another request)", i(func(s *RoleStats) int { return s.EvictKeptInUse }), "%.0f")
	add("TTFT mean (ms, estimate)", func(s *RoleStats) float64 { return s.TTFTMeanMS }, "%.1f")
	add("TTFT p50 (ms, estimate)", func(s *RoleStats) float64 { return s.TTFTP50MS }, "%.1f")
	add("TTFT p90 (ms, estimate)", func(s *RoleStats) float64 { return s.TTFTP90MS }, "%.1f")
	add("TTFT p99 (ms, estimate)", func(s *RoleStats) float64 { return s.TTFTP99MS }, "%.1f")
	return out
}
