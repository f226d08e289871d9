package tutorial

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadBlocksAndCommands(t *testing.T) {
	md := "# Title\n\n```sh\nnot in a section\n```\n\n## Part one\n\ntext\n\n" +
		"```sh\n# a comment\nkubectl get rr   # trailing\n\nkubectl get pods \\\n  -o wide\n```\n\n" +
		"```yaml\n# file.yaml\nkind: X\n```\n\n### Deeper\n\n```sh\necho x\n```\n"
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := ReadBlocks(path)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Line          int
		Section, Lang string
		Commands      []string
	}
	var g []got
	for _, b := range blocks {
		var cmds []string
		for _, c := range b.Commands() {
			cmds = append(cmds, c.Text)
		}
		g = append(g, got{b.Line, b.Section, b.Lang, cmds})
	}
	want := []got{
		{3, "Title", "sh", []string{"not in a section"}},
		{11, "Part one", "sh", []string{"kubectl get rr   # trailing", "kubectl get pods \\\n  -o wide"}},
		{19, "Part one", "yaml", []string{"kind: X"}},
		{26, "Deeper", "sh", []string{"echo x"}},
	}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
	if c := blocks[1].Commands()[1]; c.Line != 15 {
		t.Errorf("the continued command starts at line %d, want 15", c.Line)
	}

	if err := os.WriteFile(path, []byte("# T\n\n```sh\nunclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBlocks(path); err == nil {
		t.Error("an unclosed block read without an error")
	}
}
