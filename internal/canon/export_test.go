package canon

import "io"

// SetTestHook sets the function called with its size after each allocation
// of working memory, and returns a function that removes it.
func SetTestHook(f func(size int)) (reset func()) {
	testHook = f
	return func() { testHook = nil }
}

// The canonicaliser reads documents up to directMax bytes directly and
// larger ones in two passes; these force one way or the other.
var (
	DirectMax = directMax

	JSONDirect        = func(src []byte, opts Options) ([]byte, error) { return canonical(src, opts, true) }
	JSONTwoPass       = func(src []byte, opts Options) ([]byte, error) { return canonical(src, opts, false) }
	AppendJSONDirect  = func(dst, src []byte, opts Options) ([]byte, error) { return appendJSON(dst, src, opts, true) }
	AppendJSONTwoPass = func(dst, src []byte, opts Options) ([]byte, error) { return appendJSON(dst, src, opts, false) }
	WriteJSONDirect   = func(w io.Writer, src []byte, opts Options) (int64, error) { return writeJSON(w, src, opts, true) }
	WriteJSONTwoPass  = func(w io.Writer, src []byte, opts Options) (int64, error) { return writeJSON(w, src, opts, false) }
)
