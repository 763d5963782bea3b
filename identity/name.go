package identity

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Names of nodes and hubs (Machine.Name, a hub's name, the CN and aliases
// of a hub's or node's certificate) are what people type (`ping
// NAME.grid`, NODE@HUB) and what tables and logs show. Every role keeps
// to one alphabet, like a DNS label's:
//
//	1 to MaxName ASCII letters, digits, '-' and '_', the first a letter
//	or digit, and not the text form of an ID (52 base32 characters)
//
// So a name has no dot (NAME.grid names the node NAME, never a node
// called "NAME.grid"), no '@' or ':' (the separators of a virtual
// address), no space, control character or non-ASCII letter (nothing
// that rewrites a terminal or looks like another name), and does not
// shadow a lookup by ID. Names are one in any case (hubs compare them
// without regard to case). CheckName holds that; a node checks its own
// name before it attaches, a hub the name of every hello, the CA the
// names it certifies.

// MaxName is the longest name, in bytes (a DNS label's limit).
const MaxName = 63

// ErrBadName is wrapped by CheckName's errors (*NameError) and by a
// hub's refusal of a hello whose name is not one (package hub).
var ErrBadName = errors.New("bad node or hub name")

// NameError is a name that CheckName refuses, and why.
type NameError struct {
	Name string // as given (Error quotes it, escaped)
	Why  string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%v %s: %s (want 1-%d ASCII letters, digits, '-' and '_', beginning with a letter or digit; give another with --name)",
		ErrBadName, strconv.QuoteToASCII(clip(e.Name)), e.Why, MaxName)
}

func (e *NameError) Unwrap() error { return ErrBadName }

// CheckName says whether name is a node's or hub's name (see MaxName);
// its errors are *NameError.
func CheckName(name string) error {
	bad := func(why string) error { return &NameError{Name: name, Why: why} }
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxName:
		return bad(fmt.Sprintf("%d bytes long", len(name)))
	case !isAlnum(name[0]):
		return bad(fmt.Sprintf("begins with %s", strconv.QuoteRuneToASCII(rune(name[0]))))
	case LooksLikeID(name):
		return bad("has the form of a node ID, which lookups take as one")
	}
	for i, r := range name {
		if !isAlnum(byte(r)) && r != '-' && r != '_' || r >= 0x80 {
			return bad(fmt.Sprintf("has %s at byte %d", strconv.QuoteRuneToASCII(r), i))
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Printable is s as it may be shown to people among other words (a
// table's cell, a log line): unchanged if it is printable ASCII without
// spaces, quotes or backslashes, else quoted in Go's syntax with every
// control character and non-ASCII rune escaped, so that what another
// machine sent (a name, a reason) cannot move the cursor, rewrite a
// terminal, break a line or pass for another word.
func Printable(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// PrintableLine is a line of words another machine sent (a reason, an
// error, a log line) as it may be shown: every control character (a line
// break included), format character (bidirectional overrides) and
// invalid UTF-8 byte escaped as Go writes it in a quoted string, the rest
// (other letters and signs, "µs") unchanged.
func PrintableLine(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case hidden(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// hidden says whether r does something other than show itself on a
// terminal.
func hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError
}

// ShortName is name without its first dot and what follows (a host's
// name as os.Hostname may give it, with its domain): the name a node
// goes by when it is given none.
func ShortName(host string) string {
	host, _, _ = strings.Cut(host, ".")
	return host
}
