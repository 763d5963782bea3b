package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// Log lines are records: timestamped text that keeps the line as it was,
// or JSON objects with time, level, message and attributes (issue 17,
// item 9: logs had no timestamps).
func TestLogFormats(t *testing.T) {
	var b bytes.Buffer
	printf(newLogger(&b, "text").With("hub", "das3v"))("hub %s: linked to hub %s (%s)", "das3v", "g5k", "198.51.100.7:7946")
	line := b.String()
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO hub das3v: linked to hub g5k \(198\.51\.100\.7:7946\) hub=das3v\n$`).MatchString(line) {
		t.Errorf("text: %q", line)
	}
	// a joined error's lines stay in the record's one line.
	b.Reset()
	printf(newLogger(&b, "text"))("splice: %v", errors.Join(errors.New("observe at a: timeout"), errors.New("observe at b: timeout")))
	if !regexp.MustCompile(`^\S+ INFO splice: observe at a: timeout; observe at b: timeout\n$`).MatchString(b.String()) {
		t.Errorf("text, two lines: %q", b.String())
	}
	// what a peer sent cannot rewrite the terminal of whoever reads the
	// log (issue 32): control characters are escaped, in the message and
	// in attributes.
	b.Reset()
	printf(newLogger(&b, "text").With("node", "n\x1b[2J"))("hub %s: refused: %s", "das3v", "bad name \x1b]0;owned\x07\u202e")
	if !regexp.MustCompile(`^\S+ INFO hub das3v: refused: bad name \\x1b\]0;owned\\a\\u202e node="n\\x1b\[2J"\n$`).MatchString(b.String()) {
		t.Errorf("text, control characters: %q", b.String())
	}
	b.Reset()
	printf(newLogger(&b, "json").With("hub", "das3v"))("hub %s: refused: %q", "das3v", "x")
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("json: %v: %s", err, b.Bytes())
	}
	if rec["msg"] != `hub das3v: refused: "x"` || rec["level"] != "INFO" || rec["hub"] != "das3v" || rec["time"] == nil {
		t.Errorf("json: %s", b.Bytes())
	}
	root := Root()
	root.SetArgs([]string{"version", "--log-format", "xml"})
	root.SetOut(&b)
	root.SetErr(&b)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("--log-format xml: %v", err)
	}
	logFormat = "text"
}
