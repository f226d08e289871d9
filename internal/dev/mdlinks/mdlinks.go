// Package mdlinks checks the relative links and #anchors of Markdown files
// the way GitHub renders them: a link to a file of the repository names a
// file that exists, and a #anchor names a heading (or an HTML id) of the
// page it points into. Links with a scheme (https:, mailto:) are not
// followed. It reads Markdown with a small scanner of its own (fenced code,
// code spans, ATX and setext headings, inline links, reference
// definitions, HTML href and id attributes), not a full CommonMark parser,
// and imports only the standard library.
package mdlinks

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Link is one link destination found in a Markdown file.
type Link struct {
	// Line is the 1-based line the destination starts on.
	Line int
	// Dest is the destination as written, without angle brackets or title.
	Dest string
}

// Doc is what the checker needs of one Markdown file.
type Doc struct {
	// Anchors holds every fragment a link may name: the GitHub slug of each
	// heading (repeats suffixed -1, -2, ...) and every HTML id or name.
	Anchors map[string]bool
	// Links are the file's link destinations, in order.
	Links []Link
}

// Problem is a link that does not resolve.
type Problem struct {
	File   string // repository-relative, slash-separated
	Line   int
	Dest   string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: link %q: %s", p.File, p.Line, p.Dest, p.Reason)
}

var (
	atxHeading   = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine   = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	refDef       = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	htmlHref     = regexp.MustCompile(`(?i)<a\s[^>]*\bhref\s*=\s*"([^"]*)"`)
	htmlID       = regexp.MustCompile(`(?i)<[a-z][a-z0-9]*\s[^>]*\b(?:id|name)\s*=\s*"([^"]*)"`)
	inlineLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlTag      = regexp.MustCompile(`<[^>]+>`)
	schemePrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// Parse scans a Markdown file for its headings' anchors and its links.
func Parse(src []byte) Doc {
	doc := Doc{Anchors: map[string]bool{}}
	seen := map[string]int{}
	addHeading := func(text string) {
		s := Slug(text)
		if n, ok := seen[s]; ok {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		doc.Anchors[s] = true
	}
	lines := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	var fence string // the open fence's marker ("```", "~~~~", ...), or ""
	prev := ""       // the previous line, if it could be a setext heading's text
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if m := fenceOpen(trimmed); m != "" {
			fence = m
			prev = ""
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
			prev = ""
		} else if prev != "" && setextLine.MatchString(line) {
			addHeading(prev)
			prev = ""
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			doc.Anchors[m[1]] = true
		}
		code := stripCodeSpans(line)
		if m := refDef.FindStringSubmatch(code); m != nil {
			doc.Links = append(doc.Links, Link{Line: i + 1, Dest: strings.Trim(m[1], "<>")})
		}
		for _, d := range inlineDests(code) {
			doc.Links = append(doc.Links, Link{Line: i + 1, Dest: d})
		}
		for _, m := range htmlHref.FindAllStringSubmatch(code, -1) {
			doc.Links = append(doc.Links, Link{Line: i + 1, Dest: m[1]})
		}
		if strings.TrimSpace(line) == "" || strings.Contains(line, "|") || strings.HasPrefix(trimmed, "-") ||
			strings.HasPrefix(trimmed, "*") || strings.HasPrefix(trimmed, ">") || atxHeading.MatchString(line) {
			prev = ""
		} else {
			prev = strings.TrimSpace(line)
		}
	}
	return doc
}

// fenceOpen returns the marker of a code fence the line opens, or "".
func fenceOpen(trimmed string) string {
	for _, c := range []string{"`", "~"} {
		n := len(trimmed) - len(strings.TrimLeft(trimmed, c))
		if n >= 3 {
			if c == "`" && strings.Contains(trimmed[n:], "`") {
				return "" // an info string may not hold a backtick: a code span
			}
			return strings.Repeat(c, n)
		}
	}
	return ""
}

// stripCodeSpans blanks the code spans of a line, so that text in
// backticks is never read as a link.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		tick := strings.Repeat("`", n)
		end := strings.Index(line[i+n:], tick)
		if end < 0 { // no closing run on this line: literal backticks
			b.WriteString(tick)
			i += n
			continue
		}
		i += n + end + n
	}
	return b.String()
}

// inlineDests returns the destinations of the inline links and images of
// a line: what follows each "](" up to its balanced ")".
func inlineDests(line string) []string {
	var out []string
	for i := 0; ; {
		j := strings.Index(line[i:], "](")
		if j < 0 {
			return out
		}
		start := i + j + 2
		rest := strings.TrimLeft(line[start:], " ")
		var dest string
		if strings.HasPrefix(rest, "<") {
			if k := strings.IndexByte(rest, '>'); k > 0 {
				dest = rest[1:k]
			}
		} else {
			depth := 0
			k := 0
		scan:
			for ; k < len(rest); k++ {
				switch rest[k] {
				case '(':
					depth++
				case ')':
					if depth == 0 {
						break scan
					}
					depth--
				case ' ', '\t':
					break scan
				}
			}
			dest = rest[:k]
		}
		if dest != "" {
			out = append(out, dest)
		}
		i = start
	}
}

// Slug is the anchor GitHub gives a heading of this text, before repeats
// are numbered: the rendered text (link targets and HTML tags outside code
// spans removed, backticks dropped) in lower case, letters, digits, marks, '_' and '-' kept, each
// space a '-', everything else dropped.
func Slug(heading string) string {
	// Code spans render their text as it is ("<router>" stays text); the
	// rest loses link targets and HTML tags.
	var text strings.Builder
	for i, part := range strings.Split(heading, "`") {
		if i%2 == 1 {
			text.WriteString(part)
			continue
		}
		part = inlineLink.ReplaceAllString(part, "$1")
		text.WriteString(htmlTag.ReplaceAllString(part, ""))
	}
	var b strings.Builder
	for _, r := range strings.ToLower(text.String()) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Tree is the set of files a link may name: repository-relative,
// slash-separated paths. A directory exists when a file is under it.
type Tree struct {
	files map[string]bool
	dirs  map[string]bool
	read  func(name string) ([]byte, error)
	docs  map[string]Doc
}

// NewTree makes a Tree of the given files; read returns a file's bytes.
func NewTree(files []string, read func(name string) ([]byte, error)) *Tree {
	t := &Tree{files: map[string]bool{}, dirs: map[string]bool{".": true}, read: read, docs: map[string]Doc{}}
	for _, f := range files {
		f = path.Clean(f)
		t.files[f] = true
		for d := path.Dir(f); d != "." && !t.dirs[d]; d = path.Dir(d) {
			t.dirs[d] = true
		}
	}
	return t
}

func (t *Tree) doc(name string) (Doc, error) {
	if d, ok := t.docs[name]; ok {
		return d, nil
	}
	src, err := t.read(name)
	if err != nil {
		return Doc{}, err
	}
	d := Parse(src)
	t.docs[name] = d
	return d, nil
}

// Check resolves every relative link and anchor of the Markdown files
// given (paths in the tree) and returns the ones that do not resolve,
// sorted by file and line.
func (t *Tree) Check(mdFiles []string) ([]Problem, error) {
	var problems []Problem
	for _, f := range mdFiles {
		f = path.Clean(f)
		d, err := t.doc(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		for _, l := range d.Links {
			if reason := t.resolve(f, l.Dest); reason != "" {
				problems = append(problems, Problem{File: f, Line: l.Line, Dest: l.Dest, Reason: reason})
			}
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, nil
}

// resolve returns why the link dest in file from does not resolve, or "".
func (t *Tree) resolve(from, dest string) string {
	if schemePrefix.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return "" // not a link into the repository
	}
	p, frag, _ := strings.Cut(dest, "#")
	p, _, _ = strings.Cut(p, "?")
	if up, err := url.PathUnescape(p); err == nil {
		p = up
	}
	if uf, err := url.PathUnescape(frag); err == nil {
		frag = uf
	}
	target := from
	if p != "" {
		if strings.HasPrefix(p, "/") {
			target = path.Clean(strings.TrimLeft(p, "/"))
		} else {
			target = path.Join(path.Dir(from), p)
		}
		if target == ".." || strings.HasPrefix(target, "../") {
			return "points outside the repository"
		}
		if !t.files[target] && !t.dirs[target] {
			return fmt.Sprintf("no file or directory %s", target)
		}
	}
	if frag == "" || !strings.EqualFold(path.Ext(target), ".md") || !t.files[target] {
		return "" // anchors are checked only in Markdown files
	}
	d, err := t.doc(target)
	if err != nil {
		return fmt.Sprintf("cannot read %s: %v", target, err)
	}
	if !d.Anchors[frag] {
		return fmt.Sprintf("no heading or id %q in %s", frag, target)
	}
	return ""
}
