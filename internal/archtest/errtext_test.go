package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// No product code decides by an error's text: errors are typed and carry
// their facts, and callers decide with errors.Is and errors.As. This rule
// parses every non-test .go file of the product (all but internal/lab)
// and fails on a decision made from an x.Error() call: one passed to a
// strings function that searches or compares (Contains, HasPrefix, Index,
// EqualFold...) or to a regexp Match function or method, directly or
// through a variable that holds it (assigned from it, or from another
// such variable, in the same file); one compared with == or !=, or
// switched on, directly or through such a variable (but for a comparison
// with "", which only finds an error without words).

// textTests are the strings functions that decide something about a text.
var textTests = map[string]bool{
	"Contains": true, "ContainsAny": true, "ContainsRune": true, "ContainsFunc": true,
	"HasPrefix": true, "HasSuffix": true, "EqualFold": true, "Count": true,
	"Index": true, "IndexAny": true, "IndexByte": true, "IndexRune": true, "IndexFunc": true,
	"LastIndex": true, "LastIndexAny": true, "LastIndexByte": true, "LastIndexFunc": true,
	"Compare": true, "CutPrefix": true, "CutSuffix": true, "Cut": true,
}

// errTextDecisions reports, as "file:line: what", the decisions by error
// text in one parsed file.
func errTextDecisions(fset *token.FileSet, f *ast.File) []string {
	pkgName := func(path string) map[string]bool {
		names := map[string]bool{}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p != path {
				continue
			}
			if im.Name != nil {
				names[im.Name.Name] = true
			} else {
				names[filepath.Base(p)] = true
			}
		}
		return names
	}
	stringsPkg := pkgName("strings")
	var out []string
	report := func(n ast.Node, what string) {
		out = append(out, fset.Position(n.Pos()).String()+": "+what)
	}
	// fromError: objects of variables that hold an error's text: assigned
	// an x.Error() call, or another such variable (msg := err.Error();
	// last = msg), until no more are found.
	fromError := map[*ast.Object]bool{}
	errText := func(e ast.Expr) bool {
		if isErrorCall(e) {
			return true
		}
		id, ok := ast.Unparen(e).(*ast.Ident)
		return ok && id.Obj != nil && fromError[id.Obj]
	}
	for grew := true; grew; {
		grew = false
		ast.Inspect(f, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || len(as.Lhs) != len(as.Rhs) {
				return true
			}
			for i, r := range as.Rhs {
				if id, ok := as.Lhs[i].(*ast.Ident); ok && id.Obj != nil && !fromError[id.Obj] && errText(r) {
					fromError[id.Obj] = true
					grew = true
				}
			}
			return true
		})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, _ := sel.X.(*ast.Ident)
			isStrings := x != nil && x.Obj == nil && stringsPkg[x.Name] && textTests[sel.Sel.Name]
			isMatch := strings.HasPrefix(sel.Sel.Name, "Match") // regexp.MatchString, re.MatchString, re.Match...
			if !isStrings && !isMatch {
				return true
			}
			for _, a := range n.Args {
				if errText(a) {
					report(n, "decides by error text with "+exprName(sel))
					break
				}
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (errText(n.X) && !isEmptyString(n.Y) || errText(n.Y) && !isEmptyString(n.X)) {
				report(n, "compares error text with "+n.Op.String())
			}
		case *ast.SwitchStmt:
			if n.Tag != nil && errText(n.Tag) {
				report(n, "switches on error text")
			}
		}
		return true
	})
	return out
}

// isEmptyString reports whether e is the literal "": an error without
// words picks other words, and decides nothing about what failed.
func isEmptyString(e ast.Expr) bool {
	l, ok := ast.Unparen(e).(*ast.BasicLit)
	return ok && l.Kind == token.STRING && (l.Value == `""` || l.Value == "``")
}

// isErrorCall reports whether e is a call x.Error() without arguments.
func isErrorCall(e ast.Expr) bool {
	c, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok || len(c.Args) != 0 {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Error"
}

func exprName(sel *ast.SelectorExpr) string {
	if x, ok := sel.X.(*ast.Ident); ok {
		return x.Name + "." + sel.Sel.Name
	}
	return sel.Sel.Name
}

// productFiles lists the module's non-test .go files outside internal/lab
// (and outside testdata and hidden directories).
func productFiles(t *testing.T) []string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "internal/lab" || rel == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestNoDecisionByErrorText(t *testing.T) {
	files := productFiles(t)
	if len(files) < 50 {
		t.Fatalf("found only %d product files: is the module root ../..?", len(files))
	}
	fset := token.NewFileSet()
	for _, p := range files {
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		for _, d := range errTextDecisions(fset, f) {
			t.Errorf("%s: type the error and decide with errors.Is or errors.As", d)
		}
	}
}

// The rule catches planted decisions by error text, and lets pass what
// only words or wraps an error.
func TestNoDecisionByErrorTextCatchesPlanted(t *testing.T) {
	const src = `package planted

import (
	"errors"
	"fmt"
	"regexp"
	str "strings"
)

var re = regexp.MustCompile("refused")

func decide(err error) int {
	switch {
	case str.Contains(err.Error(), "refused"): // 1
		return 1
	case str.HasPrefix(fmt.Errorf("x: %w", err).Error(), "x"): // 2
		return 2
	case err.Error() == "EOF": // 3
		return 3
	case "EOF" != err.Error(): // 4
		return 4
	case re.MatchString(err.Error()): // 5
		return 5
	}
	msg := err.Error()
	if str.EqualFold(msg, "eof") { // 6
		return 6
	}
	if ok, _ := regexp.MatchString("x", msg); ok { // 7
		return 7
	}
	switch err.Error() { // 8
	case "x":
		return 8
	}
	if str.Index(err.Error(), "x") >= 0 { // 9
		return 9
	}
	return 0
}

var last string

func indirect(err error) bool {
	if m := err.Error(); m != last { // 10
		last = m
	}
	cause := ""
	cause = err.Error()
	prev := cause
	switch prev { // 11
	case "x":
		return true
	}
	return "EOF" == prev // 12
}

func fine(err error) string {
	var target *myErr
	if errors.As(err, &target) || errors.Is(err, errX) {
		return str.TrimSpace("typed: " + err.Error())
	}
	name := "a.b"
	if str.HasPrefix(name, "a") {
		return fmt.Sprintf("%v", err)
	}
	if why := err.Error(); why != "" {
		return why
	}
	return str.Join([]string{err.Error()}, ", ")
}

type myErr struct{}

func (*myErr) Error() string { return "mine" }

var errX = errors.New("x")
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "planted.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := errTextDecisions(fset, f)
	if len(got) != 12 {
		t.Fatalf("found %d decisions by error text, want the 12 planted:\n%s", len(got), str(got))
	}
	lines := strings.Split(src, "\n")
	for _, d := range got {
		// planted.go:LINE:COL: what
		parts := strings.SplitN(d, ":", 3)
		n, _ := strconv.Atoi(parts[1])
		if n < 1 || n > len(lines) || !strings.Contains(lines[n-1], "// ") {
			t.Errorf("reported %s, on a line not planted: %q", d, lines[n-1])
		}
	}
}

func str(s []string) string { return strings.Join(s, "\n") }
