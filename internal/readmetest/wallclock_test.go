package readmetest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A wall-clock assertion is a check whose outcome depends on how fast the
// machine runs: a measured duration (time.Since, time.Until, time.Now and
// what is computed from them) compared with a bound, or a short timeout
// (Eventually's waitFor, a select's time.After) whose expiry fails the
// test. On shared or loaded cores such a check fails at random. The rule
// (docs/testing.md) is to assert the order of events or the cause, to
// drive time with testing/synctest or a clock seam, or, where the bound is
// the behaviour, to give it a 4x margin and say why; performance figures
// are benchmarks in bench/. TestNoWallClockAssertions scans every Go file
// of the repository, every module, and fails on a wall-clock assertion
// that wallclockAllowed does not name.

// timeoutFloor is the shortest timeout that a failure may hang on without
// being a wall-clock assertion: a wait for something that takes
// milliseconds, given seconds, is a liveness guard (the test would hang
// otherwise), not a speed test. Shorter ones are flagged.
const timeoutFloor = 5 * time.Second

// wallclockFinding is one wall-clock assertion found in a file.
type wallclockFinding struct {
	file string // slash-separated, relative to the repository
	fn   string // the top-level function (Recv.Method for a method)
	line int
	kind string // "bound" or "timeout"
	text string // the assertion's first line of source
}

func (f wallclockFinding) key() string { return f.file + " " + f.fn }

func (f wallclockFinding) String() string {
	return fmt.Sprintf("%s:%d: %s (%s): %s", f.file, f.line, f.fn, f.kind, f.text)
}

// wallclockScanner holds one file's state.
type wallclockScanner struct {
	fset   *token.FileSet
	file   string
	consts map[string]ast.Expr // the file's constants, by name
	fields map[string]bool     // struct fields and funcs that carry a measured time
	names  map[any]bool        // the current function's variables that do
	// counts are the current function's variables changed in the body
	// of an if on a measured time: counts of what was fast or slow.
	counts map[any]bool
	// generous are the current function's deadlines set timeoutFloor or
	// more ahead of time.Now.
	generous map[any]bool
	out      []wallclockFinding
	fn       string
}

// scanWallclock returns the wall-clock assertions of one Go source file.
// consts adds constants declared elsewhere in the package (may be nil).
func scanWallclock(file string, src []byte, consts map[string]ast.Expr) ([]wallclockFinding, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0)
	if err != nil {
		return nil, err
	}
	s := &wallclockScanner{fset: fset, file: file, consts: map[string]ast.Expr{}, fields: map[string]bool{}}
	maps.Copy(s.consts, consts)
	maps.Copy(s.consts, fileConsts(f))
	// Fields and funcs that carry a measured time, to a fixed point: a
	// func returning one, a struct field set to one.
	for changed := true; changed; {
		changed = false
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			s.names = s.taint(fd.Body)
			if !s.fields[fd.Name.Name] && s.returnsTainted(fd.Body) {
				s.fields[fd.Name.Name] = true
				changed = true
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && !s.fields[k.Name] && s.tainted(n.Value) {
						s.fields[k.Name], changed = true, true
					}
				case *ast.AssignStmt:
					for i, l := range n.Lhs {
						if sel, ok := l.(*ast.SelectorExpr); ok && !s.fields[sel.Sel.Name] && s.tainted(rhsOf(n, i)) {
							s.fields[sel.Sel.Name], changed = true, true
						}
					}
				}
				return true
			})
		}
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		s.fn = fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			s.fn = recvName(fd.Recv.List[0].Type) + "." + s.fn
		}
		s.names = s.taint(fd.Body)
		ast.Inspect(fd.Body, s.visit)
	}
	return s.out, nil
}

// fileConsts returns the constants a file declares.
func fileConsts(f *ast.File) map[string]ast.Expr {
	consts := map[string]ast.Expr{}
	ast.Inspect(f, func(n ast.Node) bool {
		gd, ok := n.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			return true
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					consts[name.Name] = vs.Values[i]
				}
			}
		}
		return true
	})
	return consts
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	}
	return "?"
}

// rhsOf returns what the i-th left-hand side of an assignment is set from.
func rhsOf(a *ast.AssignStmt, i int) ast.Expr {
	if len(a.Rhs) == len(a.Lhs) {
		return a.Rhs[i]
	}
	return a.Rhs[0] // a, b := f()
}

// taint returns the variables of a function body that hold a measured
// time or duration, or a number computed from one, to a fixed point.
// Variables are told apart by their declaration (the parser's object
// resolution), by name where it resolved none.
func (s *wallclockScanner) taint(body *ast.BlockStmt) map[any]bool {
	s.names = map[any]bool{}
	s.counts = map[any]bool{}
	s.generous = map[any]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == 1 && len(a.Rhs) == 1 {
			if id, ok := a.Lhs[0].(*ast.Ident); ok {
				if call, ok := a.Rhs[0].(*ast.CallExpr); ok && len(call.Args) == 1 {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Add" && isTimeCall(sel.X, "Now") {
						if d, ok := s.constDuration(call.Args[0], 0); ok && d >= timeoutFloor {
							s.generous[varKey(id)] = true
						}
					}
				}
			}
		}
		return true
	})
	mark := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		if !ok || id.Name == "_" || id.Name == "err" || s.names[varKey(id)] {
			return false
		}
		s.names[varKey(id)] = true
		return true
	}
	for changed := true; changed; {
		changed = false
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for i, l := range n.Lhs {
					if s.tainted(rhsOf(n, i)) && mark(l) {
						changed = true
					}
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) && s.tainted(n.Values[i]) && mark(name) {
						changed = true
					}
				}
			case *ast.SendStmt:
				if s.tainted(n.Value) && mark(n.Chan) {
					changed = true
				}
			case *ast.RangeStmt:
				// The value, or a channel's only variable (which for a
				// slice is its index: errs towards finding too much).
				v := n.Value
				if v == nil {
					v = n.Key
				}
				if v != nil && s.tainted(n.X) && mark(v) {
					changed = true
				}
			case *ast.IfStmt:
				if !s.ordered(n.Cond) {
					break
				}
				ast.Inspect(n, func(m ast.Node) bool {
					var changedVars []ast.Expr
					switch m := m.(type) {
					case *ast.FuncLit:
						return false
					case *ast.IncDecStmt:
						changedVars = []ast.Expr{m.X}
					case *ast.AssignStmt:
						if m.Tok != token.DEFINE {
							changedVars = m.Lhs
						}
					}
					for _, v := range changedVars {
						if id, ok := v.(*ast.Ident); ok && id.Name != "_" && !s.counts[varKey(id)] {
							s.counts[varKey(id)], changed = true, true
						}
					}
					return true
				})
			}
			return true
		})
	}
	return s.names
}

// counted reports whether an expression holds a count kept by how fast
// things went, or anything computed from one.
func (s *wallclockScanner) counted(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && s.counts[varKey(id)] {
			found = true
		}
		_, lit := n.(*ast.FuncLit)
		return !found && !lit
	})
	return found
}

// varKey identifies a variable: its declaration, or its name.
func varKey(id *ast.Ident) any {
	if id.Obj != nil {
		return id.Obj
	}
	return id.Name
}

// returnsTainted reports whether a function body returns a measured time
// (not counting the returns of the func literals inside it).
func (s *wallclockScanner) returnsTainted(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.ReturnStmt:
			for _, r := range n.Results {
				found = found || s.tainted(r)
			}
		}
		return !found
	})
	return found
}

// passThrough are the calls whose result carries their arguments' value.
var passThrough = map[string]bool{
	"max": true, "min": true, "append": true, "float64": true, "float32": true,
	"int64": true, "int": true, "uint64": true, "Duration": true, "Abs": true,
}

// timeMethods are the methods of time.Time and time.Duration whose result
// carries a measured time given as argument.
var timeMethods = map[string]bool{"Sub": true, "Before": true, "After": true, "Compare": true, "Equal": true}

// tainted reports whether an expression holds a measured time: a call of
// time.Now, time.Since or time.Until, a tainted variable, struct field or
// func, a method of one (d.Seconds(), t.Sub(u)), or arithmetic, a
// comparison or a conversion of one. A func literal is tainted when it
// returns one. A struct holding one is not (only that field is), nor is
// what an arbitrary call returns given one.
func (s *wallclockScanner) tainted(e ast.Expr) bool {
	switch e := e.(type) {
	case nil:
		return false
	case *ast.Ident:
		return s.names[varKey(e)] || ((e.Obj == nil || e.Obj.Kind == ast.Fun) && s.fields[e.Name])
	case *ast.FuncLit:
		return s.returnsTainted(e.Body)
	case *ast.SelectorExpr:
		if pkg, ok := e.X.(*ast.Ident); ok && pkg.Name == "time" && pkg.Obj == nil {
			return false // time.Now is tainted when called
		}
		return s.fields[e.Sel.Name] || s.tainted(e.X)
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "time" && pkg.Obj == nil {
				switch sel.Sel.Name {
				case "Now", "Since", "Until":
					return true
				case "Duration":
					return slices.ContainsFunc(e.Args, s.tainted)
				}
				return false
			}
			if s.fields[sel.Sel.Name] || s.tainted(sel.X) {
				return true
			}
			if timeMethods[sel.Sel.Name] || passThrough[sel.Sel.Name] {
				return slices.ContainsFunc(e.Args, s.tainted)
			}
			return false
		}
		if id, ok := e.Fun.(*ast.Ident); ok {
			if passThrough[id.Name] {
				return slices.ContainsFunc(e.Args, s.tainted)
			}
			return s.tainted(id) // a func literal's variable, a func of the file
		}
		return s.tainted(e.Fun)
	case *ast.BinaryExpr:
		return s.tainted(e.X) || s.tainted(e.Y)
	case *ast.UnaryExpr:
		return s.tainted(e.X)
	case *ast.ParenExpr:
		return s.tainted(e.X)
	case *ast.StarExpr:
		return s.tainted(e.X)
	case *ast.IndexExpr:
		return s.tainted(e.X)
	case *ast.SliceExpr:
		return s.tainted(e.X)
	case *ast.TypeAssertExpr:
		return s.tainted(e.X)
	case *ast.CompositeLit:
		// A slice or map of measured times is one; a struct holding one
		// is not (its field is, by name).
		for _, el := range e.Elts {
			if _, kv := el.(*ast.KeyValueExpr); !kv && s.tainted(el) {
				return true
			}
		}
	}
	return false
}

// visit finds the assertions in a function body.
func (s *wallclockScanner) visit(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.CallExpr:
		sel, ok := n.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "synctest" && pkg.Obj == nil && (sel.Sel.Name == "Test" || sel.Sel.Name == "Run") {
			return false // the bubble's clock is fake: its times are exact
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || (pkg.Name != "require" && pkg.Name != "assert") {
			return true
		}
		name := strings.TrimSuffix(sel.Sel.Name, "f")
		switch name {
		case "Eventually", "EventuallyWithT":
			if len(n.Args) >= 3 && s.short(n.Args[2]) {
				s.report(n, "timeout")
			}
		case "Less", "LessOrEqual", "Greater", "GreaterOrEqual":
			if len(n.Args) >= 3 && (s.tainted(n.Args[1]) || s.tainted(n.Args[2]) || s.counted(n.Args[1]) || s.counted(n.Args[2]) ||
				s.unitBound(n.Args[1]) || s.unitBound(n.Args[2])) {
				s.report(n, "bound")
			}
		case "WithinDuration", "WithinRange", "InDelta", "InEpsilon":
			if len(n.Args) >= 4 && (s.tainted(n.Args[1]) || s.tainted(n.Args[2]) || s.tainted(n.Args[3])) {
				s.report(n, "bound")
			}
		case "True", "False", "Condition":
			if len(n.Args) >= 2 && s.ordered(n.Args[1]) {
				s.report(n, "bound")
			}
		case "Equal", "EqualValues", "NotEqual", "Zero", "NotZero", "Positive", "Negative", "Len":
			// A count kept by how fast things went (the body of an if
			// on a measured time) compared with a number. A measured
			// time itself equal to another is not a bound (a
			// timestamp stored and read back).
			for _, a := range n.Args[1:min(len(n.Args), 3)] {
				if s.counted(a) {
					s.report(n, "count")
					break
				}
			}
		}
		// Never: a slow machine polls less, so it can only pass more
		// easily.
	case *ast.IfStmt:
		if s.ordered(n.Cond) && (asserts(n.Body) || (n.Else != nil && asserts(n.Else))) {
			s.report(n, "bound")
		}
	case *ast.SelectStmt:
		for _, c := range n.Body.List {
			cc := c.(*ast.CommClause)
			if d := afterOf(cc.Comm); d != nil && s.short(d) && asserts(&ast.BlockStmt{List: cc.Body}) {
				s.report(cc, "timeout")
			}
		}
	}
	return true
}

// ordered reports whether a condition puts a measured time in order with
// another (<, >, <=, >=, Before, After, Compare), but for the bounded
// poll's "time.Now() past a deadline set timeoutFloor or more ahead".
func (s *wallclockScanner) ordered(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.BinaryExpr:
			switch n.Op {
			case token.LSS, token.GTR, token.LEQ, token.GEQ:
				found = found || s.tainted(n.X) || s.tainted(n.Y) || s.counted(n.X) || s.counted(n.Y) ||
					s.unitBound(n.X) || s.unitBound(n.Y)
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || len(n.Args) != 1 {
				break
			}
			switch sel.Sel.Name {
			case "Before", "After", "Compare":
				if s.generousPoll(sel.X, n.Args[0]) || s.generousPoll(n.Args[0], sel.X) {
					break
				}
				found = found || s.tainted(sel.X) || s.tainted(n.Args[0])
			}
		}
		return !found
	})
	return found
}

// unitBound reports whether e is a duration written with time's units
// (5*time.Second, timeout+time.Second): compared with another duration,
// which may have been measured by the code under test (a result's
// Elapsed, an observer's Duration), it is a bound.
func (s *wallclockScanner) unitBound(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "time" && pkg.Obj == nil {
				switch sel.Sel.Name {
				case "Nanosecond", "Microsecond", "Millisecond", "Second", "Minute":
					found = true
				}
			}
		}
		_, lit := n.(*ast.FuncLit)
		return !found && !lit
	})
	return found
}

// generousPoll reports whether now is a call of time.Now and deadline a
// variable set to time.Now().Add(d) with d a constant of at least
// timeoutFloor.
func (s *wallclockScanner) generousPoll(now, deadline ast.Expr) bool {
	id, ok := deadline.(*ast.Ident)
	return ok && isTimeCall(now, "Now") && s.generous[varKey(id)]
}

// isTimeCall reports whether e calls time.<name>.
func isTimeCall(e ast.Expr, name string) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "time" && pkg.Obj == nil
}

// afterOf returns d for a select case "<-time.After(d)" (received or not).
func afterOf(comm ast.Stmt) ast.Expr {
	var e ast.Expr
	switch c := comm.(type) {
	case *ast.ExprStmt:
		e = c.X
	case *ast.AssignStmt:
		e = c.Rhs[0]
	default:
		return nil
	}
	u, ok := e.(*ast.UnaryExpr)
	if !ok || u.Op != token.ARROW {
		return nil
	}
	call, ok := u.X.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return nil
	}
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "After" {
		if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "time" {
			return call.Args[0]
		}
	}
	return nil
}

// asserts reports whether a statement fails the test or may: a call of
// t.Fatal and the like, or a testify assertion.
func asserts(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !found
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "require" || pkg.Name == "assert") && pkg.Obj == nil {
			found = true
		}
		switch sel.Sel.Name {
		case "Fatal", "Fatalf", "Error", "Errorf":
			found = found || len(call.Args) > 0 // not err.Error()
		case "FailNow", "Fail":
			found = true
		}
		return !found
	})
	return found
}

// short reports whether a duration is a constant shorter than
// timeoutFloor. One that is not a constant (a lease, a test's own
// parameter) is not judged.
func (s *wallclockScanner) short(e ast.Expr) bool {
	d, ok := s.constDuration(e, 0)
	return ok && d < timeoutFloor
}

// constDuration evaluates a constant duration expression: integer and
// float literals, time's units, the file's and package's constants, and
// + - * / between them.
func (s *wallclockScanner) constDuration(e ast.Expr, depth int) (time.Duration, bool) {
	if depth > 10 {
		return 0, false
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		switch e.Kind {
		case token.INT:
			v, err := strconv.ParseInt(e.Value, 0, 64)
			return time.Duration(v), err == nil
		case token.FLOAT:
			v, err := strconv.ParseFloat(e.Value, 64)
			return time.Duration(v), err == nil && v == float64(int64(v))
		}
	case *ast.ParenExpr:
		return s.constDuration(e.X, depth+1)
	case *ast.Ident:
		if v, ok := s.consts[e.Name]; ok {
			return s.constDuration(v, depth+1)
		}
	case *ast.SelectorExpr:
		if pkg, ok := e.X.(*ast.Ident); ok && pkg.Name == "time" {
			units := map[string]time.Duration{"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond,
				"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute, "Hour": time.Hour}
			d, ok := units[e.Sel.Name]
			return d, ok
		}
	case *ast.CallExpr: // time.Duration(n)
		if len(e.Args) == 1 {
			if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Duration" {
				return s.constDuration(e.Args[0], depth+1)
			}
		}
	case *ast.BinaryExpr:
		x, ok1 := s.constDuration(e.X, depth+1)
		y, ok2 := s.constDuration(e.Y, depth+1)
		if !ok1 || !ok2 {
			return 0, false
		}
		switch e.Op {
		case token.ADD:
			return x + y, true
		case token.SUB:
			return x - y, true
		case token.MUL:
			return x * y, true
		case token.QUO:
			if y != 0 {
				return x / y, true
			}
		}
	}
	return 0, false
}

func (s *wallclockScanner) report(n ast.Node, kind string) {
	var b strings.Builder
	_ = printer.Fprint(&b, token.NewFileSet(), n)
	text, _, _ := strings.Cut(b.String(), "\n")
	s.out = append(s.out, wallclockFinding{
		file: s.file, fn: s.fn, line: s.fset.Position(n.Pos()).Line, kind: kind, text: strings.TrimSpace(text),
	})
}

// scanRepoWallclock scans every Go file of the repository, every module
// (hidden directories and testdata aside).
func scanRepoWallclock(t *testing.T) []wallclockFinding {
	t.Helper()
	byDir := map[string][]string{}
	err := repoGoFiles(func(path string) error {
		byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], path)
		return nil
	})
	require.NoError(t, err)
	var all []wallclockFinding
	for _, dir := range slices.Sorted(maps.Keys(byDir)) {
		// A package's constants, for the timeouts named by one.
		consts := map[string]ast.Expr{}
		srcs := map[string][]byte{}
		for _, path := range byDir[dir] {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			srcs[path] = b
			if f, err := parser.ParseFile(token.NewFileSet(), path, b, parser.SkipObjectResolution); err == nil {
				maps.Copy(consts, fileConsts(f))
			}
		}
		for _, path := range byDir[dir] {
			rel, err := filepath.Rel(root, path)
			require.NoError(t, err)
			found, err := scanWallclock(filepath.ToSlash(rel), srcs[path], consts)
			require.NoError(t, err)
			all = append(all, found...)
		}
	}
	return all
}

// TestNoWallClockAssertions: no test in the repository, any module,
// decides its outcome by how fast the machine runs, but those that
// wallclockAllowed names, each with the reason it is safe; and the list
// names nothing that is gone.
func TestNoWallClockAssertions(t *testing.T) {
	found := scanRepoWallclock(t)
	require.NotEmpty(t, found, "the scan finds the allowed assertions")
	seen := map[string]bool{}
	var bad []string
	for _, f := range found {
		seen[f.key()] = true
		if _, ok := wallclockAllowed[f.key()]; !ok {
			bad = append(bad, f.String())
		}
	}
	require.Empty(t, bad, "wall-clock assertions: a test must not depend on how fast the machine runs. "+
		"Assert the order of events or the cause, drive time with testing/synctest or a clock seam, or move a "+
		"performance figure to bench/; where the bound is the behaviour, give it a 4x margin, say why in a comment, "+
		"and add the test to wallclockAllowed with the reason (docs/testing.md)")
	for _, key := range slices.Sorted(maps.Keys(wallclockAllowed)) {
		require.True(t, seen[key], "wallclockAllowed names %q, which has no wall-clock assertion any more: remove it", key)
		require.NotEmpty(t, strings.TrimSpace(wallclockAllowed[key]), "wallclockAllowed: %q says not why it is safe", key)
	}
}

// TestWallClockGuardFindsPlantedAssertions: the scanner finds the forms a
// wall-clock assertion takes, among them the one that flaked most often
// (require.Less of a time.Since), and none of the forms that only log a
// time, poll with a generous bound, bound a loop, or run on a fake clock.
func TestWallClockGuardFindsPlantedAssertions(t *testing.T) {
	const head = "package p\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\n"
	flagged := map[string]string{
		"require.Less of time.Since": `func TestPlanted(t *testing.T) {
	start := time.Now()
	work()
	require.Less(t, time.Since(start), 100*time.Millisecond)
}`,
		"assert through a variable": `func TestPlanted(t *testing.T) {
	start := time.Now()
	work()
	took := time.Since(start)
	assert.LessOrEqual(t, took.Milliseconds(), int64(100), "too slow")
}`,
		"if and t.Fatalf": `func TestPlanted(t *testing.T) {
	start := time.Now()
	work()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("took %v", d)
	}
}`,
		"through a channel": `func TestPlanted(t *testing.T) {
	took := make(chan time.Duration, 1)
	go func() { start := time.Now(); work(); took <- time.Since(start) }()
	require.Less(t, <-took, time.Second)
}`,
		"through a struct field": `type result struct{ took time.Duration }

func TestPlanted(t *testing.T) {
	start := time.Now()
	r := result{took: time.Since(start)}
	require.True(t, r.took < time.Second)
}`,
		"through a func": `func elapsed(start time.Time) time.Duration { return time.Since(start) }

func TestPlanted(t *testing.T) {
	require.Less(t, elapsed(time.Now()), time.Second)
}`,
		"short Eventually": `const wait = 500 * time.Millisecond

func TestPlanted(t *testing.T) {
	require.Eventually(t, func() bool { return done() }, wait, 10*time.Millisecond)
}`,
		"short select": `func TestPlanted(t *testing.T) {
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
		t.Fatal("not done")
	}
}`,
		"a result's Elapsed against time's units": `func TestPlanted(t *testing.T) {
	res := run()
	if res.Elapsed > 5*time.Second {
		t.Fatalf("took %v", res.Elapsed)
	}
}`,
		"WithinDuration": `func TestPlanted(t *testing.T) {
	require.WithinDuration(t, time.Now(), stamp(), 50*time.Millisecond)
}`,
	}
	for name, src := range flagged {
		t.Run(name, func(t *testing.T) {
			found, err := scanWallclock("planted_test.go", []byte(head+src+"\n"), nil)
			require.NoError(t, err)
			require.Len(t, found, 1, "%v", found)
			require.Equal(t, "TestPlanted", found[0].fn)
			require.Equal(t, "planted_test.go TestPlanted", found[0].key())
		})
	}
	// And the guard fails on it: the planted file's finding is not allowed.
	found, err := scanWallclock("internal/planted/planted_test.go", []byte(head+flagged["require.Less of time.Since"]+"\n"), nil)
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.NotContains(t, wallclockAllowed, found[0].key())
	require.Equal(t, 11, found[0].line)
	require.Equal(t, "require.Less(t, time.Since(start), 100*time.Millisecond)", found[0].text)

	clean := map[string]string{
		"a logged time": `func TestClean(t *testing.T) {
	start := time.Now()
	err := work()
	require.NoError(t, err, "after %v", time.Since(start))
	t.Logf("took %v", time.Since(start))
}`,
		"a bounded poll": `func TestClean(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.True(t, done())
}`,
		"a generous Eventually and a Never": `func TestClean(t *testing.T) {
	require.Eventually(t, done, 10*time.Second, 10*time.Millisecond)
	require.Never(t, done, 100*time.Millisecond, 10*time.Millisecond)
}`,
		"a generous select": `func TestClean(t *testing.T) {
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("not done")
	}
}`,
		"a synctest bubble": `func TestClean(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		time.Sleep(time.Second)
		require.Less(t, time.Since(start), 2*time.Second)
	})
}`,
		"a fake clock": `func TestClean(t *testing.T) {
	clock := fake.Clock()
	clock.Advance(time.Second)
	require.Equal(t, 2*time.Second, ttl(clock))
}`,
	}
	for name, src := range clean {
		t.Run(name, func(t *testing.T) {
			found, err := scanWallclock("clean_test.go", []byte(head+src+"\n"), nil)
			require.NoError(t, err)
			require.Empty(t, found)
		})
	}
}

// TestStressRunsTheReadmeTestCommand: .ci/stress finds the README's test
// command (its line in "Two commands"), and .ci/run runs the same, so that
// what a developer stresses is what CI and a new user run.
func TestStressRunsTheReadmeTestCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^(go test [^#\n]*[^ #\n]) *# the test suite`).FindAllSubmatch(readme, -1)
	require.Len(t, m, 1, "README.md gives one test command ('go test ... # the test suite')")
	want := string(m[0][1])

	stress, err := os.ReadFile(filepath.Join(root, ".ci", "stress"))
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^cmd=\$\(sed .*$`).Find(stress)
	require.NotNil(t, line, ".ci/stress reads the command from README.md with sed")
	cmd := exec.Command("bash", "-c", string(line)+"\nprintf %s \"$cmd\"")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	require.Equal(t, want, string(out), ".ci/stress's command")

	run, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	require.Contains(t, string(run), "\n"+want+"\n", ".ci/run runs the README's test command once")
}

// TestNoIssueNumbersInCode: no Go file of the repository, any module,
// names a test, a file or a behaviour by the tracker's number (the word
// issue and a number): a reader without the tracker learns nothing from
// it. Name them for the behaviour they hold; the history belongs in
// commit messages and CHANGELOG.md.
func TestNoIssueNumbersInCode(t *testing.T) {
	ref := regexp.MustCompile(`(?i)\bissues?[ _]*#?[0-9]+|\bissue[0-9]+`)
	var found []string
	n := 0
	err := repoGoFiles(func(path string) error {
		n++
		rel, _ := filepath.Rel(root, path)
		if ref.MatchString(filepath.Base(path)) {
			found = append(found, rel)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := ref.FindString(line); m != "" {
				found = append(found, fmt.Sprintf("%s:%d: %q", rel, i+1, m))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, n)
	require.Empty(t, found, "name tests, files and comments for the behaviour they hold, not the issue that asked for them")
}
