package hintsconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// source is what ParseConfig learned from the YAML text itself, beyond the
// values: the line of every role, hint item and parameter, so a problem
// points at FILE:LINE, and the non-finite numbers it stood in for.
//
// The values are still read the way Kubernetes tools read YAML
// (sigs.k8s.io/yaml, YAML 1.1), so the operator, the CLI and the sidecar
// agree on them; a YAML parser that keeps positions (go.yaml.in/yaml/v3)
// reads the same text first to locate things and to refuse what YAML 1.1
// would read silently wrong.
type source struct {
	// lines maps a path ("worker_selection/decode/hints/1/parameters/
	// ttl_seconds") to its 1-based line.
	lines map[string]int
	// nonFinite are the .nan and .inf values found, by path, each replaced
	// in the text by a finite stand-in before the YAML 1.1 read (JSON, and
	// so the providers, cannot hold them); see standIn.
	nonFinite []nonFinite
	// wide are the integers written wider than 64 bits, each replaced in
	// the text by a quoted stand-in before the YAML 1.1 read (which would
	// round it to a float64) and written back into the JSON as written, so
	// that a provider quotes the value the user wrote; see wideInteger.
	wide []wideLiteral
	// instanceOf maps a role whose bare entry named an instance to that
	// instance's path ("worker_selection/instances/0"), where its type and
	// parameters are written.
	instanceOf map[string]string
}

// wideLiteral is an integer as written and the token standing in for it.
type wideLiteral struct{ token, text string }

// wideTokenPrefix starts the stand-in of a wide integer; a file that holds
// it already keeps its wide integers as YAML 1.1 reads them.
const wideTokenPrefix = "kvhint-wide-integer-"

// wideIntegerRe is a plain decimal integer as JSON writes one.
var wideIntegerRe = regexp.MustCompile(`^-?[1-9][0-9]*$`)

// wideInteger reports whether n is a plain decimal integer that neither an
// int64 nor a uint64 holds: YAML 1.1 reads it as the nearest float64 (or,
// past float64's range, as a string), so a message quoting it would quote
// another number.
func wideInteger(n *yamlv3.Node) bool {
	if n.Style != 0 || !wideIntegerRe.MatchString(n.Value) {
		return false
	}
	if _, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
		return false
	}
	_, err := strconv.ParseUint(n.Value, 10, 64)
	return err != nil
}

// restoreWide writes each wide integer back into js, the YAML 1.1 read of
// the text, as written.
func (s *source) restoreWide(js []byte) []byte {
	if s == nil {
		return js
	}
	for _, w := range s.wide {
		js = bytes.ReplaceAll(js, []byte(`"`+w.token+`"`), []byte(w.text))
	}
	return js
}

type nonFinite struct {
	role string
	hint int
	key  string // the parameter key, when the value is a parameter's
	text string // as written: .nan, -.inf, ...
	line int
}

// standIn replaces .nan and +.inf in the text the providers read: the
// largest float64, which a range check with an upper bound refuses in its
// own words ("... is out of range 0..100"); the stand-in in those words is
// then rewritten back to the value as written. -.inf gets its negation. A
// parameter with no upper bound accepts it, and Compile refuses the value
// itself (source.checkNonFinite).
var standIn = strconv.FormatFloat(math.MaxFloat64, 'g', -1, 64)

var (
	// unknownKeyRe finds the key of an "unknown key" problem.
	unknownKeyRe = regexp.MustCompile(`unknown key "([^"]*)"`)
	// fieldPrefixRe reads the field a structural problem starts with:
	// "hints[2].name: ...", "type: ...".
	fieldPrefixRe = regexp.MustCompile(`^([a-z_]+)(?:\[(\d+)\])?(?:\.([a-z_]+))?: `)
)

// instanceRe reads the index of a worker_selection.instances problem.
var instanceRe = regexp.MustCompile(`^worker_selection\.instances(?:\[(\d+)\])?`)

// lineRe finds the line in a YAML parser's error.
var lineRe = regexp.MustCompile(`line (\d+)`)

// document decodes the one non-empty YAML document of data with the
// position-keeping parser; nil when there is none. A syntax error is a
// problem at its line, its error first passed through better (which may
// word it better); a second document is a problem at its first line,
// which why explains.
func document(data []byte, better func(error) error, why string) (*yamlv3.Node, *Problem) {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var docs []*yamlv3.Node
	for {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if better != nil {
				err = better(err)
			}
			p := configProblem("", "not valid YAML: "+err.Error())
			if m := lineRe.FindStringSubmatch(err.Error()); m != nil {
				p.Line, _ = strconv.Atoi(m[1])
			}
			return nil, &p
		}
		if !emptyDocument(&doc) {
			docs = append(docs, &doc)
		}
	}
	switch len(docs) {
	case 0:
		return nil, nil
	case 1:
		return docs[0], nil
	}
	p := configProblem("", fmt.Sprintf("the file holds %d YAML documents; %s", len(docs), why))
	p.Line = docs[1].Line
	if len(docs[1].Content) > 0 {
		p.Line = docs[1].Content[0].Line
	}
	return nil, &p
}

// readSource reads the text with a position-keeping parser. It returns the
// text for the YAML 1.1 read (with non-finite numbers replaced), what it
// learned, and the problems that stop the parse: more than one document,
// mapping keys that YAML 1.1 would turn into something other than the
// string written.
func readSource(data []byte) ([]byte, *source, Problems) {
	src := &source{lines: map[string]int{}}
	// The YAML 1.1 reader places flow errors better (the line the flow
	// starts on); it is the one that decides anyway.
	better := func(err error) error {
		if _, err11 := yaml.YAMLToJSONStrict(data); err11 != nil {
			return err11
		}
		return err
	}
	doc, p := document(data, better, "a hints YAML is one document, the config of one router (a second one would be ignored by the router)")
	if p != nil {
		return nil, nil, Problems{*p}
	}
	if doc == nil {
		return data, src, nil
	}
	var probs Problems
	var edits []edit
	edited := map[*yamlv3.Node]bool{}
	wideOK := !bytes.Contains(data, []byte(wideTokenPrefix))
	var walk func(n *yamlv3.Node, path []string)
	walk = func(n *yamlv3.Node, path []string) {
		if n.Kind == yamlv3.AliasNode && n.Alias != nil {
			// An alias reads as its anchor's value: its place is checked
			// like the anchor's, and the anchor's text is edited once.
			if n.Alias.Kind != yamlv3.ScalarNode {
				return // a mapping or list behind an alias: its paths are the anchor's
			}
			n = n.Alias
		}
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if p, ok := coercedKey(k, path); ok {
					probs = append(probs, p)
					continue
				}
				sub := append(append([]string(nil), path...), k.Value)
				src.lines[strings.Join(sub, "/")] = k.Line
				walk(v, sub)
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				sub := append(append([]string(nil), path...), strconv.Itoa(i))
				src.lines[strings.Join(sub, "/")] = c.Line
				walk(c, sub)
			}
		case yamlv3.ScalarNode:
			if wideOK && wideInteger(n) {
				if edited[n] {
					return
				}
				if off, ok := offsetOf(data, n.Line, n.Column, n.Value); ok {
					token := wideTokenPrefix + strconv.Itoa(len(src.wide))
					edits = append(edits, edit{off: off, n: len(n.Value), with: `"` + token + `"`})
					edited[n] = true
					src.wide = append(src.wide, wideLiteral{token: token, text: n.Value})
				}
				return
			}
			if n.ShortTag() != "!!float" {
				return
			}
			f, err := strconv.ParseFloat(strings.NewReplacer(".inf", "inf", ".Inf", "inf", ".INF", "inf", ".nan", "nan", ".NaN", "nan", ".NAN", "nan").Replace(n.Value), 64)
			if err != nil || (!math.IsNaN(f) && !math.IsInf(f, 0)) {
				return
			}
			nf := nonFinite{hint: NoHint, text: n.Value, line: n.Line}
			if len(path) >= 2 && path[0] == "worker_selection" {
				nf.role = path[1]
				rest := path[2:]
				if len(rest) >= 2 && rest[0] == "hints" {
					nf.hint, _ = strconv.Atoi(rest[1])
					rest = rest[2:]
				}
				if len(rest) == 2 && rest[0] == "parameters" {
					nf.key = rest[1]
				}
			}
			repl := standIn
			if f < 0 {
				repl = "-" + standIn
			}
			if edited[n] {
				src.nonFinite = append(src.nonFinite, nf)
				return
			}
			if off, ok := offsetOf(data, n.Line, n.Column, n.Value); ok {
				edits = append(edits, edit{off: off, n: len(n.Value), with: repl})
				edited[n] = true
				src.nonFinite = append(src.nonFinite, nf)
				return
			}
			probs = append(probs, Problem{Severity: SeverityError, Reason: ReasonInvalidConfig, Role: nf.role, Hint: nf.hint, Key: nf.key, Line: n.Line,
				Message: fmt.Sprintf("%s: %s is not a finite number", strings.Join(path, "."), n.Value)})
		}
	}
	walk(doc, nil)
	if len(probs) > 0 {
		return nil, nil, probs
	}
	return applyEdits(data, edits), src, nil
}

// emptyDocument reports whether a document holds nothing: only comments,
// or an explicit "---" with no content.
func emptyDocument(doc *yamlv3.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	c := doc.Content[0]
	return len(doc.Content) == 1 && c.Kind == yamlv3.ScalarNode && c.ShortTag() == "!!null" && c.Style == 0
}

// coercedKey refuses a plain mapping key that a YAML 1.1 reader (the one
// Kubernetes tools and the router use) turns into something other than the
// string written: yes, no, on, off, y, n become booleans, 1 a number, ~ a
// null. Role names above all must stay as written; quoted keys are kept.
func coercedKey(k *yamlv3.Node, path []string) (Problem, bool) {
	if k.Kind != yamlv3.ScalarNode || k.Style&(yamlv3.DoubleQuotedStyle|yamlv3.SingleQuotedStyle|yamlv3.LiteralStyle|yamlv3.FoldedStyle) != 0 {
		return Problem{}, false
	}
	// The key as a YAML 1.1 reader makes it: "yes: 0" reads as
	// {"true": 0}; "decode: 0" as {"decode": 0}.
	js, err := yaml.YAMLToJSON([]byte(k.Value + ": 0"))
	var m map[string]json.RawMessage
	if err != nil || json.Unmarshal(js, &m) != nil || len(m) != 1 {
		return Problem{}, false // not a key YAML 1.1 can read alone; the full read reports it
	}
	var read string
	for read = range m {
	}
	if read == k.Value {
		return Problem{}, false
	}
	p := Problem{Severity: SeverityError, Reason: ReasonInvalidConfig, Hint: NoHint, Line: k.Line}
	what := "key"
	if len(path) == 1 && path[0] == "worker_selection" {
		what, p.Role = "role key", k.Value
	} else if len(path) >= 2 && path[0] == "worker_selection" {
		p.Role = path[1]
	}
	p.Message = fmt.Sprintf("%s %s is read as %q by YAML 1.1, which Kubernetes tools and the router use; keys are kept as written only when quoted: write %q:",
		what, k.Value, read, k.Value)
	return p, true
}

// edit replaces n bytes at off.
type edit struct {
	off, n int
	with   string
}

func applyEdits(data []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return data
	}
	var b bytes.Buffer
	last := 0
	for _, e := range edits { // in document order, as the walk found them
		b.Write(data[last:e.off])
		b.WriteString(e.with)
		last = e.off + e.n
	}
	b.Write(data[last:])
	return b.Bytes()
}

// offsetOf turns a parser position (1-based line, 1-based column counted
// in characters) into a byte offset, and checks that value is written
// there.
func offsetOf(data []byte, line, column int, value string) (int, bool) {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return 0, false
		}
		off += i + 1
	}
	for c := 1; c < column; c++ {
		if off >= len(data) {
			return 0, false
		}
		_, size := utf8.DecodeRune(data[off:])
		off += size
	}
	// The position of a node with an anchor or a tag is that of "&x" or
	// "!!float"; the value follows it.
	for range 2 {
		if off >= len(data) || (data[off] != '&' && data[off] != '!') {
			break
		}
		for off < len(data) && data[off] != ' ' && data[off] != '\t' && data[off] != '\n' {
			off++
		}
		for off < len(data) && (data[off] == ' ' || data[off] == '\t') {
			off++
		}
	}
	return off, bytes.HasPrefix(data[off:], []byte(value))
}

// line returns the line of the most precise path known for a problem.
func (s *source) line(p Problem) int {
	if s == nil {
		return 0
	}
	if p.Role == "" {
		if strings.HasPrefix(p.Message, kvHintPolicyKey) {
			var candidates []string
			if p.Key != "" {
				candidates = append(candidates, kvHintPolicyKey+"/parameters/"+p.Key)
			}
			switch p.Reason {
			case ReasonUnknownHintType:
				candidates = append(candidates, kvHintPolicyKey+"/type")
			case ReasonInvalidParameters:
				candidates = append(candidates, kvHintPolicyKey+"/parameters")
			}
			for _, c := range append(candidates, kvHintPolicyKey) {
				if l, ok := s.lines[c]; ok {
					return l
				}
			}
			return 0
		}
		if m := instanceRe.FindStringSubmatch(p.Message); m != nil {
			if m[1] == "" {
				return s.lines["worker_selection/instances"]
			}
			return s.lines["worker_selection/instances/"+m[1]]
		}
		if strings.HasPrefix(p.Message, "worker_selection ") {
			return s.lines["worker_selection"]
		}
		if m := unknownKeyRe.FindStringSubmatch(p.Message); m != nil {
			return s.lines[m[1]]
		}
		return s.lines[strings.SplitN(p.Message, " ", 2)[0]]
	}
	role := "worker_selection/" + p.Role
	var candidates []string
	if p.Reason == ReasonInvalidConfig {
		// The structural errors of ParseConfigJSON start with the field:
		// "hints[0].name: got 7, want a string", "unknown key \"x\"".
		if m := fieldPrefixRe.FindStringSubmatch(p.Message); m != nil {
			path := role + "/" + m[1]
			if m[2] != "" {
				candidates = append(candidates, path+"/"+m[2]+"/"+m[3], path+"/"+m[2])
			} else if m[3] != "" {
				candidates = append(candidates, path+"/"+m[3])
			}
			candidates = append(candidates, path)
		}
		if m := unknownKeyRe.FindStringSubmatch(p.Message); m != nil {
			candidates = append(candidates, role+"/"+m[1])
		}
	}
	entry := role
	if inst, ok := s.instanceOf[p.Role]; ok {
		entry = inst
	}
	if p.Hint != NoHint {
		hint := role + "/hints/" + strconv.Itoa(p.Hint)
		if p.Key != "" {
			candidates = append(candidates, hint+"/parameters/"+p.Key)
		}
		switch p.Reason {
		case ReasonUnknownHintType:
			candidates = append(candidates, hint+"/type")
		case ReasonInvalidHintName, ReasonDuplicateHintName:
			candidates = append(candidates, hint+"/name")
		case ReasonInvalidParameters:
			candidates = append(candidates, hint+"/parameters")
		}
		candidates = append(candidates, hint)
	} else {
		if p.Key != "" {
			candidates = append(candidates, entry+"/parameters/"+p.Key)
		}
		switch p.Reason {
		case ReasonUnknownWorkerSelection:
			candidates = append(candidates, entry+"/type")
		case ReasonInvalidParameters:
			candidates = append(candidates, entry+"/parameters")
		case ReasonKVCopySenderMissing, ReasonKVCopySenderDuplicate, ReasonHintsRequireKVMode, ReasonTooManyHints, ReasonKVCopySenderUnused:
			candidates = append(candidates, role+"/hints")
		}
	}
	candidates = append(candidates, role)
	for _, c := range candidates {
		if l, ok := s.lines[c]; ok {
			return l
		}
	}
	return 0
}

// locate sets the line of every problem that has none.
func (s *source) locate(probs Problems) {
	for i := range probs {
		if probs[i].Line == 0 {
			probs[i].Line = s.line(probs[i])
		}
	}
}

// restoreNonFinite rewrites the stand-in of a non-finite number back to
// the value as written in the problems of its role, so that a provider's
// own message ("... is out of range 0..1") reads as the user wrote it.
func (s *source) restoreNonFinite(probs Problems) {
	if s == nil {
		return
	}
	for i := range probs {
		p := &probs[i]
		for _, nf := range s.nonFinite {
			if nf.role != p.Role || !strings.Contains(p.Message, standIn) {
				continue
			}
			if nf.key != "" && p.Key != "" && (nf.key != p.Key || nf.hint != p.Hint) {
				continue
			}
			p.Message = strings.Replace(strings.Replace(p.Message, "-"+standIn, nf.text, 1), standIn, nf.text, 1)
			if nf.key != "" && p.Key == nf.key {
				p.Line = nf.line
			}
		}
	}
}

// checkNonFinite fails a role that compiled although a parameter of it was
// .nan or .inf: its provider accepted the stand-in, so it has no upper
// bound, but the value as written is not a number it can run with.
func (s *source) checkNonFinite(role string, typ func(hint int) string, probs Problems) Problems {
	if s == nil {
		return nil
	}
	var out Problems
	for _, nf := range s.nonFinite {
		if nf.role != role {
			continue
		}
		reported := false
		for _, p := range probs {
			if p.Severity == SeverityError && p.Hint == nf.hint && (p.Key == nf.key || p.Key == "") {
				reported = true
			}
		}
		if reported {
			continue
		}
		out = append(out, Problem{Severity: SeverityError, Reason: ReasonInvalidParameters, Role: role, Hint: nf.hint, Type: typ(nf.hint), Key: nf.key, Line: nf.line,
			Message: fmt.Sprintf("parameter %q: %s is not a finite number", nf.key, nf.text)})
	}
	return out
}
