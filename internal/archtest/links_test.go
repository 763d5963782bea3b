package archtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation's relative links lead somewhere: every link of
// README.md, DEVELOPERS.md, BENCHMARKS.md and docs/ (and examples/) to a
// file names one that exists, and every #anchor a heading of its page,
// by GitHub's rules. Links to other sites are not followed (no network).

var (
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`) // a heading's link: its text
)

// markdownFiles are the pages checked, relative to the repository root.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "DEVELOPERS.md", "BENCHMARKS.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// proseLines are md's lines outside fenced code blocks, inline code
// removed.
func proseLines(md string) []string {
	var out []string
	fence := ""
	for _, l := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(l)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			out = append(out, "")
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			out = append(out, "")
			continue
		}
		out = append(out, inlineCode.ReplaceAllString(l, ""))
	}
	return out
}

// slug is a heading's anchor as GitHub makes it: lower case, spaces to
// '-', punctuation but '-' and '_' dropped.
func slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.ReplaceAll(h, "`", "")) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of md's headings (a repeated one gets -1, -2...).
func anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range proseLinesKeepCode(md) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// proseLinesKeepCode is proseLines with inline code kept (headings'
// anchors include its words).
func proseLinesKeepCode(md string) []string {
	lines := strings.Split(md, "\n")
	prose := proseLines(md)
	for i := range prose {
		if prose[i] != "" {
			prose[i] = lines[i]
		}
	}
	return prose
}

// brokenLinks lists the relative links of page (relative to root) that
// lead nowhere.
func brokenLinks(root, page string) ([]string, error) {
	pageAnchors := map[string]map[string]bool{} // by file
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return nil, err
	}
	var broken []string
	for n, l := range proseLines(string(b)) {
		for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			where := filepath.Join(root, page)
			if file != "" {
				where = filepath.Join(filepath.Dir(where), file)
				if _, err := os.Stat(where); err != nil {
					broken = append(broken, fmt.Sprintf("%s:%d: %s: no such file", page, n+1, target))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(where, ".md") {
				continue // line anchors of source files (#L10) are GitHub's
			}
			if pageAnchors[where] == nil {
				md, err := os.ReadFile(where)
				if err != nil {
					return nil, err
				}
				pageAnchors[where] = anchors(string(md))
			}
			if !pageAnchors[where][anchor] {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: no heading with that anchor", page, n+1, target))
			}
		}
	}
	return broken, nil
}

func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, page := range markdownFiles(t, root) {
		broken, err := brokenLinks(root, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
	}
}

// The checker itself: a missing file, a missing anchor and links in code
// are told apart from good links.
func TestDocLinksChecker(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# Nodes and hubs\n\n## The hub's `--peer` flag, again!\n\n## Notes\n\n## Notes\n")
	write("README.md", "[a](docs/a.md) [b](docs/a.md#nodes-and-hubs) [c](docs/a.md#the-hubs---peer-flag-again) [d](docs/a.md#notes-1)\n"+
		"[e](https://example.org/x) `[f](nowhere.md)`\n```\n[g](nowhere.md)\n```\n"+
		"[h](docs/b.md) [i](docs/a.md#nodes) [j](#here)\n")
	broken, err := brokenLinks(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:6: docs/b.md: no such file",
		"README.md:6: docs/a.md#nodes: no heading with that anchor",
		"README.md:6: #here: no heading with that anchor",
	}
	if strings.Join(broken, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken:\n%s\nwant:\n%s", strings.Join(broken, "\n"), strings.Join(want, "\n"))
	}
}
