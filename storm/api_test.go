package storm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAPIIsStdlibOnly: every type the package's exported names show is the
// standard library's, the package's own, or idemclient's (itself
// standard-library only), so that a program using storm as a library
// takes no other dependency through its API.
func TestAPIIsStdlibOnly(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	allowed := func(path string) bool {
		first, _, _ := strings.Cut(path, "/")
		return !strings.Contains(first, ".") || path == "github.com/idemkey/idemkey/idemclient"
	}
	shown := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		imports := map[string]string{} // local name -> path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			imports[local] = path
		}
		visit := func(n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok {
						if path, ok := imports[id.Name]; ok {
							shown[path] = true
							require.True(t, allowed(path), "%s: an exported name shows %s.%s", fset.Position(sel.Pos()), path, sel.Sel.Name)
						}
					}
				}
				return true
			})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && (d.Recv == nil || receiverExported(d.Recv)) {
					visit(d.Type)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								if len(field.Names) == 0 || slices.ContainsFunc(field.Names, func(n *ast.Ident) bool { return n.IsExported() }) {
									visit(field.Type)
								}
							}
							continue
						}
						visit(s.Type)
					case *ast.ValueSpec:
						if slices.ContainsFunc(s.Names, func(n *ast.Ident) bool { return n.IsExported() }) && s.Type != nil {
							visit(s.Type)
						}
					}
				}
			}
		}
	}
	require.True(t, shown["net/http"] && shown["time"], "the walk saw the API: %v", shown)
}

func receiverExported(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
