package declared

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// locator finds the line of a path such as
// "hints[1].parameters.properties.ttl" in the declaration's text, read a
// second time by a YAML parser that keeps positions.
type locator struct{ root *yamlv3.Node }

func newLocator(data []byte) locator {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return locator{}
	}
	return locator{root: doc.Content[0]}
}

// line returns the line of the deepest node on path that exists, or 0.
func (l locator) line(path string) int {
	n := l.root
	if n == nil {
		return 0
	}
	best := 0
	for _, seg := range splitPath(path) {
		var next *yamlv3.Node
		switch {
		case n.Kind == yamlv3.MappingNode && seg.index < 0:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg.key {
					best, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
		case n.Kind == yamlv3.SequenceNode && seg.index >= 0 && seg.index < len(n.Content):
			next = n.Content[seg.index]
			best = next.Line
		}
		if next == nil {
			break
		}
		n = next
	}
	return best
}

// numberAt returns the text of the scalar at a top-level key when YAML
// reads it as a number (tag !!int or !!float), "" otherwise: a string
// field given such a scalar gets the number's shortest spelling, so
// 1.10 would arrive as "1.1".
func (l locator) numberAt(key string) string {
	if l.root == nil || l.root.Kind != yamlv3.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(l.root.Content); i += 2 {
		if v := l.root.Content[i+1]; l.root.Content[i].Value == key && v.Kind == yamlv3.ScalarNode {
			if tag := v.ShortTag(); tag == "!!int" || tag == "!!float" {
				return v.Value
			}
		}
	}
	return ""
}

type segment struct {
	key   string
	index int
}

// splitPath splits "a.b[2].c" into a, b, [2], c.
func splitPath(path string) []segment {
	var out []segment
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.Index(part, "[")
			if i < 0 {
				out = append(out, segment{key: part, index: -1})
				break
			}
			if i > 0 {
				out = append(out, segment{key: part[:i], index: -1})
			}
			j := strings.Index(part, "]")
			if j < i {
				break
			}
			n, err := strconv.Atoi(part[i+1 : j])
			if err != nil {
				break
			}
			out = append(out, segment{index: n})
			part = part[j+1:]
		}
	}
	return out
}

// documents counts the YAML documents in the text.
func documents(data []byte) int {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			return n + 1
		}
		n++
	}
}
