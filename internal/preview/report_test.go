package preview

import (
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"
)

// outsideCode is text with its Markdown code spans taken out: what a
// reader of the rendered report sees as markup.
func outsideCode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '`' {
			b.WriteByte(s[i])
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		fence := s[i : i+n]
		end := -1
		for j := i + n; j < len(s); {
			k := strings.Index(s[j:], fence)
			if k < 0 {
				break
			}
			k += j
			if k+n < len(s) && s[k+n] == '`' { // a longer run: not the fence
				for k < len(s) && s[k] == '`' {
					k++
				}
				j = k
				continue
			}
			end = k
			break
		}
		if end < 0 { // no closing fence: the run is literal text
			b.WriteString(fence)
			i += n
			continue
		}
		i = end + n
	}
	return b.String()
}

// reportHeadings are the headings the report writes.
var reportHeadings = []string{"## kvhint preview", "### Role ", "### Assumptions", "### Trace", "### Sensitivity", "### End-to-end TTFT"}

// Request IDs (and the trace's path) come from the trace, that is from whoever sent the
// bookings: in the Markdown report they stay text inside their table
// cell, never headings, mentions, HTML comments or new rows.
func TestMarkdownEscapesTraceStrings(t *testing.T) {
	attacks := []string{
		"# Approved by security",
		"@everyone please merge",
		"<!-- the rest is hidden",
		"x` @admin `y",
		"``` fence",
		"a|b\n## Injected heading\n| forged | row |",
		"`",
	}
	r := &Report{Base: "base", Head: "head", Rows: 1, Assumptions: DefaultAssumptions(),
		Roles: []RoleReport{{Role: "decode", Base: &RoleStats{}, Head: &RoleStats{}, Changed: len(attacks)}}}
	r.Trace.Path = attacks[0]
	for _, a := range attacks {
		r.Roles[0].Examples = append(r.Roles[0].Examples, Change{RequestID: a, Base: []string{}, Head: []string{"kv.evict"}})
	}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	text := outsideCode(md)
	for _, bad := range []string{"@", "<!--", "Approved", "Injected", "forged", "fence"} {
		if strings.Contains(text, bad) {
			t.Errorf("%q is markup in the report, outside any code span:\n%s", bad, md)
		}
	}
	rows := 0
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| `") || strings.HasPrefix(l, "| ``") {
			rows++
		}
		if strings.HasPrefix(strings.TrimSpace(l), "#") && !slices.ContainsFunc(reportHeadings, func(h string) bool { return strings.HasPrefix(l, h) }) {
			t.Errorf("a heading the report did not write: %q", l)
		}
	}
	if rows != len(attacks) {
		t.Errorf("%d example rows, want %d:\n%s", rows, len(attacks), md)
	}
}

// The plot is well-formed SVG with one bar per window and panel, and a
// note when there is no interval.
func TestWriteSVG(t *testing.T) {
	r := &Report{Verdict: Verdict{Word: VerdictImproves}, Interval: &Interval{Windows: 3, WidthS: 60,
		ByWindow: []WindowDelta{{0, 1.5, -2}, {1, -0.5, 1}, {2, 0, 0}}}}
	var b strings.Builder
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(b.String()))
	rects := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if rects != 6 {
		t.Errorf("%d bars, want 6", rects)
	}
	b.Reset()
	if err := (&Report{}).WriteSVG(&b); err != nil || !strings.Contains(b.String(), "no window interval") {
		t.Errorf("without an interval: %v\n%s", err, b.String())
	}
}
