package hintsconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// readYAML12 reads a policy file the way a released Dynamo Frontend does
// (serde_yaml 0.9: YAML 1.2 scalars, so on, yes and no are strings, and a
// duplicate key is an error) into JSON that keeps every number exactly as
// written: an integer stays an integer of any width, a float keeps its
// fraction or exponent (so 1.0 reaches an integer field as a float, to be
// refused there), and nothing is rounded through a float64. It returns the
// JSON, the line of every path, and the problems that stop the read: text
// that is not YAML, more than one document, a duplicate key, and a float
// that is not finite (.inf, .nan), which JSON cannot hold and which every
// float Dynamo checks must not be.
func readYAML12(data []byte) ([]byte, *source, Problems) {
	src := &source{lines: map[string]int{}}
	doc, p := document(data, nil, "Dynamo reads one (deserializing from YAML containing more than one document is not supported)")
	if p != nil {
		return nil, nil, Problems{*p}
	}
	if doc == nil {
		return []byte("null"), src, nil
	}
	r := yaml12Reader{src: src}
	var b bytes.Buffer
	r.write(&b, doc.Content[0], nil)
	if len(r.probs) > 0 {
		return nil, nil, r.probs
	}
	return b.Bytes(), src, nil
}

type yaml12Reader struct {
	src   *source
	probs Problems
	depth int
}

// maxYAMLDepth bounds nesting (and alias expansion), so a crafted file
// cannot exhaust the stack.
const maxYAMLDepth = 64

func (r *yaml12Reader) fail(n *yamlv3.Node, path []string, msg string) {
	p := configProblem(pathRole(path), msg)
	p.Line = n.Line
	r.probs = append(r.probs, p)
}

// pathRole is the role a path is under, for problems.
func pathRole(path []string) string {
	if len(path) >= 2 && path[0] == "worker_selection" && IsRole(path[1]) {
		return path[1]
	}
	return ""
}

func (r *yaml12Reader) write(b *bytes.Buffer, n *yamlv3.Node, path []string) {
	if r.depth > maxYAMLDepth {
		r.fail(n, path, fmt.Sprintf("%s: nested deeper than %d levels", dotted(path), maxYAMLDepth))
		b.WriteString("null")
		return
	}
	r.depth++
	defer func() { r.depth-- }()
	switch n.Kind {
	case yamlv3.AliasNode:
		r.write(b, n.Alias, path)
	case yamlv3.MappingNode:
		b.WriteByte('{')
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yamlv3.AliasNode && k.Alias != nil {
				k = k.Alias
			}
			key := k.Value
			if first, dup := seen[key]; dup {
				r.fail(k, path, fmt.Sprintf("%s: duplicate entry with key %q (first at line %d); Dynamo's YAML reader refuses a key written twice", dottedOr(path, "the root"), key, first))
				continue
			}
			seen[key] = k.Line
			if i > 0 {
				b.WriteByte(',')
			}
			kj, _ := json.Marshal(key)
			b.Write(kj)
			b.WriteByte(':')
			sub := append(append([]string(nil), path...), key)
			r.src.lines[strings.Join(sub, "/")] = k.Line
			r.write(b, v, sub)
		}
		b.WriteByte('}')
	case yamlv3.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			sub := append(append([]string(nil), path...), strconv.Itoa(i))
			r.src.lines[strings.Join(sub, "/")] = c.Line
			r.write(b, c, sub)
		}
		b.WriteByte(']')
	case yamlv3.ScalarNode:
		r.scalar(b, n, path)
	default:
		b.WriteString("null")
	}
}

func (r *yaml12Reader) scalar(b *bytes.Buffer, n *yamlv3.Node, path []string) {
	switch n.ShortTag() {
	case "!!null":
		b.WriteString("null")
	case "!!bool":
		if v, err := strconv.ParseBool(strings.ToLower(n.Value)); err == nil && v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case "!!int":
		if lit, ok := integerJSON(n.Value); ok {
			b.WriteString(lit)
			return
		}
		r.fail(n, path, fmt.Sprintf("%s: %s is not an integer", dotted(path), n.Value))
		b.WriteString("null")
	case "!!float":
		lit, err := floatJSON(n.Value)
		if err != nil {
			r.fail(n, path, fmt.Sprintf("%s: %s is not a finite number; Dynamo refuses it (its floats must be finite; JSON, and so the compiled file, cannot hold it either)", dotted(path), n.Value))
			b.WriteString("null")
			return
		}
		b.WriteString(lit)
	default:
		js, _ := json.Marshal(n.Value)
		b.Write(js)
	}
}

// integerJSON writes a YAML 1.2 integer (decimal, 0x, 0o) as a JSON
// integer of any width, decimal digits as written.
func integerJSON(s string) (string, bool) {
	t := strings.TrimPrefix(s, "+")
	neg := strings.HasPrefix(t, "-")
	body := strings.TrimPrefix(t, "-")
	base := 10
	switch {
	case strings.HasPrefix(body, "0x"):
		base, body = 16, body[2:]
	case strings.HasPrefix(body, "0o"):
		base, body = 8, body[2:]
	}
	v, ok := new(big.Int).SetString(body, base)
	if !ok {
		return "", false
	}
	if neg {
		v.Neg(v)
	}
	if base == 10 && wideIntegerRe.MatchString(t) {
		return t, true // as written
	}
	return v.String(), true
}

// floatJSON writes a finite YAML 1.2 float as a JSON number that still
// reads as a float (a fraction or an exponent), as written where JSON
// allows it.
func floatJSON(s string) (string, error) {
	t := strings.TrimPrefix(s, "+")
	f, err := strconv.ParseFloat(strings.NewReplacer(".inf", "inf", ".Inf", "inf", ".INF", "inf", ".nan", "nan", ".NaN", "nan", ".NAN", "nan").Replace(t), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("not finite")
	}
	if json.Valid([]byte(t)) && strings.ContainsAny(t, ".eE") {
		return t, nil
	}
	out := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(out, ".eE") {
		out += ".0"
	}
	return out, nil
}

func dotted(path []string) string { return strings.Join(path, ".") }

func dottedOr(path []string, root string) string {
	if len(path) == 0 {
		return root
	}
	return dotted(path)
}
