package filecheck

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// manifestPositions locates the objects of a manifest file, for problems
// that point at FILE:LINE. Documents are split and numbered exactly as
// rolegraph.ReadManifests splits them (the Kubernetes YAML reader: a line
// starting with "---" ends a document, empty documents are skipped), so a
// document number in its errors finds its line here.
//
// It is not pkg/hintsconfig's locator (source.go), though both read
// yaml.v3 nodes: that one is part of reading one policy file (it resolves
// aliases, refuses coerced keys, rewrites non-finite numbers) and maps a
// Problem's role, hint, key and reason to a line of a worker_selection
// path; this one splits multi-document manifests as the Kubernetes reader
// does and finds objects by kind and name, then their spec fields. They
// have inputs, path grammars and callers of their own.
type manifestPositions struct {
	// documents are the first line of each document, by number - 1.
	documents []int
	// objects are the RouterRoles and HintPolicies, by "Kind ns/name"
	// (objectName), first definition in the file.
	objects map[string]*yamlv3.Node
}

func newManifestPositions(data []byte) *manifestPositions {
	mp := &manifestPositions{objects: map[string]*yamlv3.Node{}}
	var chunk bytes.Buffer
	start := 0
	flush := func() {
		if chunk.Len() == 0 {
			return
		}
		first := start
		var doc yamlv3.Node
		if yamlv3.Unmarshal(chunk.Bytes(), &doc) == nil && len(doc.Content) > 0 {
			shift(&doc, start-1)
			first = doc.Content[0].Line
			mp.collect(doc.Content[0])
		}
		mp.documents = append(mp.documents, first)
		chunk.Reset()
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for i, line := range lines {
		if bytes.HasPrefix(line, []byte("---")) {
			flush()
			continue
		}
		if len(line) == 0 {
			continue
		}
		if chunk.Len() == 0 {
			start = i + 1
		}
		chunk.Write(line)
	}
	flush()
	return mp
}

// collect records an object, or the items of a List.
func (mp *manifestPositions) collect(n *yamlv3.Node) {
	kind := scalar(child(n, "kind"))
	if strings.HasSuffix(kind, "List") {
		if items := child(n, "items"); items != nil && items.Kind == yamlv3.SequenceNode {
			for _, item := range items.Content {
				mp.collect(item)
			}
		}
		return
	}
	meta := child(n, "metadata")
	key := objectName(kind, scalar(child(meta, "namespace")), scalar(child(meta, "name")))
	if _, dup := mp.objects[key]; !dup {
		mp.objects[key] = n
	}
}

// document returns the first line of document n (1-based), or 0.
func (mp *manifestPositions) document(n int) int {
	if mp == nil || n < 1 || n > len(mp.documents) {
		return 0
	}
	return mp.documents[n-1]
}

var fieldStep = regexp.MustCompile(`^([^\[]*)((?:\[\d+\])*)$`)

// field returns the line of a field of an object ("spec.hints[1]"), or of
// the deepest part of the path that is written, or of the object.
func (mp *manifestPositions) field(object, path string) int {
	if mp == nil {
		return 0
	}
	n, ok := mp.objects[object]
	if !ok {
		return 0
	}
	line := n.Line
	if path == "" {
		return line
	}
	for _, step := range strings.Split(path, ".") {
		m := fieldStep.FindStringSubmatch(step)
		if m == nil {
			return line
		}
		k := child(n, m[1])
		if k == nil {
			return line
		}
		line, n = keyLine(n, m[1]), k
		for _, idx := range regexp.MustCompile(`\d+`).FindAllString(m[2], -1) {
			i, _ := strconv.Atoi(idx)
			if n.Kind != yamlv3.SequenceNode || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
		}
	}
	return line
}

// child returns the value of key in a mapping node, or nil.
func child(n *yamlv3.Node, key string) *yamlv3.Node {
	if n == nil || n.Kind != yamlv3.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func keyLine(n *yamlv3.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

func scalar(n *yamlv3.Node) string {
	if n == nil || n.Kind != yamlv3.ScalarNode {
		return ""
	}
	return n.Value
}

// shift moves every line of a document parsed alone to its line in the
// file.
func shift(n *yamlv3.Node, by int) {
	n.Line += by
	for _, c := range n.Content {
		shift(c, by)
	}
}
