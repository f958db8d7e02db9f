// Command optgen writes the code that keeps the middleware's options in one
// place. httpmw/options.go holds the one hand-written definition of Options;
// what the Gin adapter does differently is in ginmw/options.go (the struct
// ginOptions: Skip and Scope on the *gin.Context, and the Gin-only
// ErrorHandler, each with its documentation). optgen derives from them:
//
//   - ginmw/options_gen.go: ginmw.Options, httpmw's fields with their
//     documentation, ginOptions' in place of or beside them, so that go doc
//     shows every field from either adapter;
//   - internal/httpcore/config_gen.go: httpcore.Config, the fields the core
//     reads, with the request hooks (Skip, Scope) taking the request and
//     the adapter's own context;
//   - the config methods of both adapters, which turn their Options into
//     the Config, and a test helper that turns httpmw.Options into
//     ginmw.Options for the contract suite.
//
// Run it with go generate ./httpmw after changing either file; a test fails
// while the generated files are out of date.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	root, err := moduleRoot()
	if err == nil {
		var files map[string][]byte
		if files, err = generate(root); err == nil {
			for name, b := range files {
				if err = os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
					break
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "optgen:", err)
		os.Exit(1)
	}
}

// moduleRoot finds the directory of go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 10 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		dir = filepath.Dir(dir)
	}
	return "", fmt.Errorf("no go.mod above the working directory")
}

// field is one field of an options struct.
type field struct {
	name string
	typ  string   // as written in the source
	doc  []string // comment lines, with their "//"
}

// A hook is a field whose type is a function of the request (httpmw) or of
// the *gin.Context (ginmw); the core takes both the request and the
// adapter's context.
const (
	httpHook = "func(r *http.Request)"
	ginHook  = "func(c *gin.Context)"
	coreHook = "func(r *http.Request, c any)"
)

// hookResults returns what a hook type returns, and whether typ is a hook
// with the parameter list param.
func hookResults(typ, param string) (string, bool) {
	rest, ok := strings.CutPrefix(typ, param)
	return strings.TrimSpace(rest), ok
}

// qualified are the httpmw names ginmw's docs must qualify.
var qualified = regexp.MustCompile(`\b(DefaultFinal|DefaultProblemBase|ErrShutdown)\b`)

// options is what optgen reads: httpmw's fields, and ginmw's.
type options struct {
	http []field
	gin  map[string]field
	// ginOnly are ginmw's fields that httpmw has not, each after the field
	// it follows in ginOptions ("" for the first).
	ginOnly map[string][]field
}

func generate(root string) (map[string][]byte, error) {
	httpFields, err := parseStruct(root, "httpmw/options.go", "Options")
	if err != nil {
		return nil, err
	}
	ginFields, err := parseStruct(root, "ginmw/options.go", "ginOptions")
	if err != nil {
		return nil, err
	}
	o := options{http: httpFields, gin: map[string]field{}, ginOnly: map[string][]field{}}
	shared := map[string]bool{}
	for _, f := range httpFields {
		shared[f.name] = true
	}
	prev := ""
	for _, g := range ginFields {
		if shared[g.name] {
			o.gin[g.name] = g
		} else {
			o.ginOnly[prev] = append(o.ginOnly[prev], g)
		}
		prev = g.name
	}
	for _, f := range httpFields {
		_, isHook := hookResults(f.typ, httpHook)
		g, inGin := o.gin[f.name]
		if _, isGinHook := hookResults(g.typ, ginHook); inGin && !(isHook && isGinHook) {
			return nil, fmt.Errorf("ginmw.ginOptions.%s: only hooks (%s in httpmw, %s in ginmw) may differ", f.name, httpHook, ginHook)
		}
	}
	files := map[string][]byte{}
	for name, gen := range map[string]func(options) ([]byte, error){
		"ginmw/options_gen.go":            ginOptions,
		"httpmw/config_gen.go":            httpConfig,
		"internal/httpcore/config_gen.go": coreConfig,
		"ginmw/export_gen_test.go":        ginFromHTTP,
	} {
		b, err := gen(o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[name] = b
	}
	return files, nil
}

// parseStruct returns the fields of the struct type name in file.
func parseStruct(root, file, name string) ([]field, error) {
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var st *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == name {
			st, _ = ts.Type.(*ast.StructType)
		}
		return st == nil
	})
	if st == nil {
		return nil, fmt.Errorf("%s has no struct type %s", file, name)
	}
	var out []field
	for _, fl := range st.Fields.List {
		if len(fl.Names) != 1 || fl.Doc == nil {
			return nil, fmt.Errorf("%s.%s: every field needs its own line and a doc comment (at %v)", file, name, fset.Position(fl.Pos()))
		}
		fd := field{name: fl.Names[0].Name, typ: string(src[fset.Position(fl.Type.Pos()).Offset:fset.Position(fl.Type.End()).Offset])}
		for _, c := range fl.Doc.List {
			fd.doc = append(fd.doc, c.Text)
		}
		out = append(out, fd)
	}
	return out, nil
}

func header(from string) string {
	return "// Code generated by internal/optgen from " + from + "; DO NOT EDIT.\n\n"
}

const bothSources = "httpmw/options.go and ginmw/options.go"

// ginOrder returns ginmw.Options' fields in order: httpmw's, each replaced
// by ginmw's where it has its own, with the Gin-only fields after the field
// they follow in ginOptions.
func (o options) ginOrder() []field {
	out := append([]field(nil), o.ginOnly[""]...)
	for _, f := range o.http {
		if g, ok := o.gin[f.name]; ok {
			out = append(out, g)
		} else {
			doc := make([]string, len(f.doc))
			for i, line := range f.doc {
				doc[i] = qualified.ReplaceAllString(line, "httpmw.$1")
			}
			out = append(out, field{name: f.name, typ: f.typ, doc: doc})
		}
		out = append(out, o.ginOnly[f.name]...)
	}
	return out
}

// writeFields writes struct fields with their docs.
func writeFields(b *bytes.Buffer, fields []field) {
	for i, f := range fields {
		if i > 0 {
			b.WriteString("\n")
		}
		for _, line := range f.doc {
			b.WriteString("\t" + line + "\n")
		}
		fmt.Fprintf(b, "\t%s %s\n", f.name, f.typ)
	}
}

// writeConfig writes the body of a config method: the fields copied, the
// hooks wrapped by wrap(name, results).
func writeConfig(b *bytes.Buffer, o options, wrap func(name, results string) string) {
	b.WriteString("// config returns o as the core's configuration.\nfunc (o *Options) config() httpcore.Config {\n\tc := httpcore.Config{\n")
	var hooks []field
	for _, f := range o.http {
		if _, ok := hookResults(f.typ, httpHook); ok {
			hooks = append(hooks, f)
			continue
		}
		fmt.Fprintf(b, "\t\t%s: o.%s,\n", f.name, f.name)
	}
	b.WriteString("\t}\n")
	for _, f := range hooks {
		results, _ := hookResults(f.typ, httpHook)
		v := strings.ToLower(f.name)
		fmt.Fprintf(b, "\tif o.%s != nil {\n\t\t%s := o.%s\n\t\tc.%s = %s\n\t}\n", f.name, v, f.name, f.name, wrap(v, results))
	}
	b.WriteString("\treturn c\n}\n")
}

func ginOptions(o options) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header(bothSources))
	b.WriteString(`package ginmw

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/internal/httpcore"
)

// Options configures the middleware. The zero value gives the defaults.
// They are httpmw.Options, with Scope and Skip taking the *gin.Context, and
// ErrorHandler for Gin's error pattern.
type Options struct {
`)
	writeFields(&b, o.ginOrder())
	b.WriteString("}\n\n")
	writeConfig(&b, o, func(v, results string) string {
		return fmt.Sprintf("func(_ *http.Request, gc any) %s { return %s(gc.(*gin.Context)) }", results, v)
	})
	b.WriteString(`
// the imports every field type may need
var (
	_ context.Context
	_ *slog.Logger
	_ time.Duration
	_ gin.HandlerFunc
)
`)
	return gofmt(b.Bytes())
}

func httpConfig(o options) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header("httpmw/options.go"))
	b.WriteString("package httpmw\n\nimport (\n\t\"net/http\"\n\n\t\"github.com/idemkey/idemkey/internal/httpcore\"\n)\n\n")
	writeConfig(&b, o, func(v, results string) string {
		return fmt.Sprintf("func(r *http.Request, _ any) %s { return %s(r) }", results, v)
	})
	return gofmt(b.Bytes())
}

// coreConfig writes httpcore.Config: httpmw's fields, the hooks taking the
// adapter's context too, and the adapters' part (adapterConfig).
func coreConfig(o options) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header("httpmw/options.go"))
	b.WriteString(`package httpcore

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// Config is the middleware's configuration: the fields of httpmw.Options,
// whose documentation is the reference (ginmw.Options are the same), as the
// adapters' generated config methods fill them in. The hooks (Skip, Scope)
// take the request and the adapter's own context: the *gin.Context for
// ginmw, nil for httpmw. adapterConfig holds what is not an option.
type Config struct {
`)
	for _, f := range o.http {
		typ := f.typ
		if results, ok := hookResults(typ, httpHook); ok {
			typ = coreHook + " " + results
		}
		fmt.Fprintf(&b, "\t%s %s\n", f.name, typ)
	}
	b.WriteString(`
	adapterConfig
}

// the imports every field type may need
var (
	_ context.Context
	_ *slog.Logger
	_ time.Duration
	_ *http.Request
)
`)
	return gofmt(b.Bytes())
}

// ginFromHTTP writes a test helper that turns httpmw.Options into
// ginmw.Options, so that ginmw runs the contract suite written for both.
func ginFromHTTP(o options) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header(bothSources))
	b.WriteString(`package ginmw

import (
	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/httpmw"
)

// OptionsFromHTTP returns o as ginmw.Options, for the tests. The Gin-only
// fields are left zero.
func OptionsFromHTTP(o httpmw.Options) Options {
	g := Options{
`)
	var hooks []field
	for _, f := range o.http {
		if _, ok := hookResults(f.typ, httpHook); ok {
			hooks = append(hooks, f)
			continue
		}
		fmt.Fprintf(&b, "\t\t%s: o.%s,\n", f.name, f.name)
	}
	b.WriteString("\t}\n")
	for _, f := range hooks {
		results, _ := hookResults(f.typ, httpHook)
		fmt.Fprintf(&b, "\tif o.%s != nil {\n\t\tg.%s = func(c *gin.Context) %s { return o.%s(c.Request) }\n\t}\n", f.name, f.name, results, f.name)
	}
	b.WriteString("\treturn g\n}\n")
	return gofmt(b.Bytes())
}

func gofmt(b []byte) ([]byte, error) {
	out, err := format.Source(b)
	if err != nil {
		return nil, fmt.Errorf("generated code does not parse: %w\n%s", err, b)
	}
	return out, nil
}
