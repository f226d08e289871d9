package preview

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteSVG plots the window interval: per time window, the prefix hit
// delta (pp) and the TTFT delta (%), as bars about zero, one panel each.
// It writes a note instead when the report has no interval.
func (r *Report) WriteSVG(w io.Writer) error {
	const width, panel, top, left = 640, 150, 30, 60
	var b strings.Builder
	height := top + 2*panel + 40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	iv := r.Interval
	if iv == nil || len(iv.ByWindow) == 0 {
		fmt.Fprintf(&b, `<text x="10" y="20">no window interval (a trace with no span, or --windows below 2)</text>`+"\n</svg>\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, `<text x="10" y="16">kvhint preview: head - base over %d windows of %.0f s (verdict: %s)</text>`+"\n", iv.Windows, iv.WidthS, r.Verdict.Word)
	bar := float64(width-left-20) / float64(iv.Windows)
	for p, m := range []struct {
		name string
		get  func(WindowDelta) float64
	}{{"prefix hit (pp)", func(d WindowDelta) float64 { return d.HitPP }}, {"TTFT mean (%)", func(d WindowDelta) float64 { return d.TTFTPct }}} {
		y0 := float64(top + p*panel)
		peak := 0.0
		for _, d := range iv.ByWindow {
			peak = math.Max(peak, math.Abs(m.get(d)))
		}
		if peak == 0 {
			peak = 1
		}
		zero := y0 + float64(panel)/2
		scale := (float64(panel)/2 - 12) / peak
		fmt.Fprintf(&b, `<text x="4" y="%.0f">%s</text>`+"\n", y0+12, m.name)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888"/>`+"\n", left, zero, width-20, zero)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">0</text>`+"\n", left-4, zero+4)
		for _, d := range iv.ByWindow {
			v := m.get(d)
			x := float64(left) + float64(d.Index)*bar + 4
			h := math.Abs(v) * scale
			y := zero - h
			if v < 0 {
				y = zero
			}
			color := "#3a7"
			if (p == 0) != (v >= 0) {
				color = "#c44" // fewer hits, or a longer TTFT
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, bar-8, h, color)
			ty := y - 3
			if v < 0 {
				ty = y + h + 11
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%+.2f</text>`+"\n", x+(bar-8)/2, ty, v)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">window 1 to %d, by arrival; green is better for head</text>`+"\n", left, height-8, iv.Windows)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
