package tutorial

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	// File and Line locate the block's opening fence.
	File string
	Line int
	// Section is the heading the block sits under, as written ("A first
	// role"); empty before the first heading.
	Section string
	// Lang is the fence's info string ("sh", "yaml").
	Lang string
	// Lines are the block's lines, fences excluded.
	Lines []string
}

// ReadBlocks returns the fenced code blocks of a Markdown file, in order.
func ReadBlocks(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks  []Block
		cur     *Block
		section string
		n       int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &Block{File: path, Line: n, Section: section, Lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Lines = append(cur.Lines, line)
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a code block is never closed", path, cur.Line)
	}
	return blocks, nil
}

// Command is one shell command of a block: its lines joined where they end
// in a backslash, as the shell reads them.
type Command struct {
	File string
	Line int
	Text string
}

func (c Command) String() string { return fmt.Sprintf("%s:%d: %s", c.File, c.Line, c.Text) }

// Commands splits an sh block into its commands, comment-only and blank
// lines left out.
func (b Block) Commands() []Command {
	var (
		out  []Command
		cur  []string
		from int
	)
	for i, line := range b.Lines {
		t := strings.TrimSpace(line)
		if len(cur) == 0 {
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			from = b.Line + 1 + i
		}
		cur = append(cur, line)
		if strings.HasSuffix(t, `\`) {
			continue
		}
		out = append(out, Command{File: b.File, Line: from, Text: strings.Join(cur, "\n")})
		cur = nil
	}
	if len(cur) > 0 {
		out = append(out, Command{File: b.File, Line: from, Text: strings.Join(cur, "\n")})
	}
	return out
}
