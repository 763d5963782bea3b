package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// shellWords splits a command line as sh does for the simple lines of
// the README: words apart by spaces, quotes kept together, a # comment
// and a trailing & dropped.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	if n := len(words); n > 0 && words[n-1] == "&" {
		words = words[:n-1]
	}
	return words
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// Every gridlink command line in the README's examples names a command
// and flags that exist, as a new user types them.
func TestReadmeCommandsParse(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range shBlock.FindAllStringSubmatch(string(b), -1) {
		text := strings.ReplaceAll(m[1], "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			words := shellWords(strings.TrimSpace(line))
			if len(words) < 2 || words[0] != "gridlink" {
				continue
			}
			n++
			c, args, err := Root().Find(words[1:])
			if err != nil || c == Root() {
				t.Errorf("README: %s: no such command (%v)", line, err)
				continue
			}
			if err := c.ParseFlags(args); err != nil {
				t.Errorf("README: %s: %v", line, err)
			}
		}
	}
	if n < 20 {
		t.Errorf("%d gridlink command lines in the README's examples; want the quick start's and the uses'", n)
	}
}
