package canon_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/canon"
)

// both canonicalises src both ways the package can, directly and in two
// passes, into a result and into a writer, requires the same outcome of
// all, and returns it. Documents too large to be read directly (where that
// could take time in the square of the depth) are read in two passes only.
func both(t *testing.T, src []byte, opts canon.Options) ([]byte, error) {
	t.Helper()
	jsonDirect, writeDirect := canon.JSONDirect, canon.WriteJSONDirect
	if len(src) > canon.DirectMax {
		jsonDirect, writeDirect = canon.JSONTwoPass, canon.WriteJSONTwoPass
	}
	direct, err := jsonDirect(src, opts)
	twoPass, err2 := canon.JSONTwoPass(src, opts)
	require.Equal(t, fmt.Sprint(err), fmt.Sprint(err2), "direct and two-pass errors differ for %q", src)
	require.Equal(t, string(direct), string(twoPass), "direct and two-pass results differ for %q", src)
	if err != nil {
		require.Equal(t, errors.Unwrap(err), errors.Unwrap(err2))
		require.Nil(t, direct)
		require.Nil(t, twoPass)
	} else {
		require.Equal(t, len(direct), cap(direct))
		require.Equal(t, len(twoPass), cap(twoPass))
	}
	for _, write := range []func(io.Writer, []byte, canon.Options) (int64, error){writeDirect, canon.WriteJSONTwoPass} {
		var buf bytes.Buffer
		n, err3 := write(&buf, src, opts)
		require.Equal(t, fmt.Sprint(err), fmt.Sprint(err3))
		require.Equal(t, int64(buf.Len()), n)
		require.Equal(t, string(direct), buf.String(), "WriteJSON wrote other bytes for %q", src)
	}
	return direct, err
}

func canonical(t *testing.T, src string, opts canon.Options) string {
	t.Helper()
	out, err := both(t, []byte(src), opts)
	require.NoError(t, err, "input %q", src)
	return string(out)
}

func TestCanonicalForm(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"scalar true", `true`, `true`},
		{"scalar false", ` false `, `false`},
		{"scalar null", "\n\tnull\r\n", `null`},
		{"scalar string", `"hi"`, `"hi"`},
		{"scalar number", `42`, `42`},
		{"empty object", `{ }`, `{}`},
		{"empty array", `[ ]`, `[]`},
		{"sorted members", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
		{"whitespace removed", "{ \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } }", `{"a":[1,2],"b":{}}`},
		{"nested objects sorted", `{"z":{"y":{"b":1,"a":2},"x":0},"a":null}`, `{"a":null,"z":{"x":0,"y":{"a":2,"b":1}}}`},
		{"arrays keep order", `[3,1,2,"b","a",[2,1]]`, `[3,1,2,"b","a",[2,1]]`},
		{"objects in arrays sorted", `[{"b":1,"a":2},{"d":[{"f":1,"e":2}],"c":3}]`, `[{"a":2,"b":1},{"c":3,"d":[{"e":2,"f":1}]}]`},
		{"sort is bytewise on UTF-8", `{"é":1,"z":2,"Z":3,"":4,"a":5,"ab":6}`, `{"":4,"Z":3,"a":5,"ab":6,"z":2,"é":1}`},
		{"sort uses decoded names", `{"\u0062":1,"a":2,"\"":3,"\\":4}`, `{"\"":3,"\\":4,"a":2,"b":1}`},
		{"astral after BMP private use", `{"😀":1,"\ue000":2}`, "{\"\ue000\":2,\"😀\":1}"},
		{"escaped slash", `"\/"`, `"/"`},
		{"escaped unicode", `"\u00e9\u00E9"`, `"éé"`},
		{"short escapes kept", `"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{"short escapes from \\u", `"\u0008\u000c\u000A\u000d\u0009"`, `"\b\f\n\r\t"`},
		{"control chars as \\u00xx", `"\u0000\u001F\u001b"`, `"\u0000\u001f\u001b"`},
		{"quote and backslash", `"\u0022\u005c"`, `"\"\\"`},
		{"DEL and line separators raw", `"\u007f\u2028\u2029"`, "\"\x7f\u2028\u2029\""},
		{"surrogate pair", `"\ud83d\uDE00"`, `"😀"`},
		{"raw UTF-8 kept", `"日本語 😀"`, `"日本語 😀"`},
		{"big integer exact", `12345678901234567890123`, `1.2345678901234567890123e+22`},
		{"literals in containers", `{"t":true,"f":false,"n":null}`, `{"f":false,"n":null,"t":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := canonical(t, tt.in, canon.Options{})
			require.Equal(t, tt.want, got)
			require.True(t, json.Valid([]byte(got)))
			require.Equal(t, got, canonical(t, got, canon.Options{}), "not idempotent")
		})
	}
}

func TestNumbers(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"0", "-0", "0.0", "-0.000", "0e0", "0E+99", "-0e-99", "0e999999999999999999999999"}, "0"},
		{[]string{"1", "1.0", "1e0", "10e-1", "0.1E1", "100e-2", "1.000e+0", "1e-0", "1E00"}, "1"},
		{[]string{"-1", "-1.0", "-10E-1"}, "-1"},
		{[]string{"100", "1e2", "1E+2", "10e1", "100.00", "0.1e3"}, "100"},
		{[]string{"1.5", "15e-1", "0.15e1", "1.50"}, "1.5"},
		{[]string{"-2.25", "-225e-2"}, "-2.25"},
		{[]string{"123.45", "12345e-2", "1.2345e2", "0.0012345e5"}, "123.45"},
		{[]string{"0.5", "5e-1", "0.50"}, "0.5"},
		{[]string{"0.000001", "1e-6", "10e-7"}, "0.000001"},
		{[]string{"0.0000001", "1e-7", "1E-7"}, "1e-7"},
		{[]string{"0.00000015", "1.5e-7"}, "1.5e-7"},
		{[]string{"0.00012", "1.2e-4"}, "0.00012"},
		{[]string{"100000000000000000000", "1e20"}, "100000000000000000000"},
		{[]string{"1000000000000000000000", "1e21"}, "1e+21"},
		{[]string{"123456789012345678901", "1.23456789012345678901e20"}, "123456789012345678901"},
		{[]string{"1234567890123456789012", "1.234567890123456789012e21"}, "1.234567890123456789012e+21"},
		{[]string{"123456789012345678901.5"}, "123456789012345678901.5"},
		{[]string{"9007199254740993"}, "9007199254740993"},
		{[]string{"3.141592653589793238462643383279"}, "3.141592653589793238462643383279"},
		{[]string{"1e400"}, "1e+400"},
		{[]string{"-1.5e-400"}, "-1.5e-400"},
		{[]string{"1e999999999999999999999"}, "1e+999999999999999999999"},
		{[]string{"12.5e999999999999999999999"}, "1.25e+1000000000000000000000"},
		{[]string{"0.001e-999999999999999999999"}, "1e-1000000000000000000002"},
		// A borrow out of the exponent's leading 1: the canonical text is
		// shorter than the exponent written, and is built in an exactly sized
		// buffer without growing it (found by FuzzNumbers).
		{[]string{"0.011e1000000000000000000"}, "1.1e+999999999999999998"},
		{[]string{"123e-1000000000000000000", "1.23e-999999999999999998"}, "1.23e-999999999999999998"},
		{[]string{"1e-00000000000000000000000000005"}, "0.00001"},
	}
	for _, tt := range tests {
		for _, in := range tt.in {
			t.Run(in, func(t *testing.T) {
				require.Equal(t, tt.want, canonical(t, in, canon.Options{}))
				require.Equal(t, "["+tt.want+"]", canonical(t, "[ "+in+" ]", canon.Options{}))
				require.Equal(t, tt.want, canonical(t, tt.want, canon.Options{}), "not idempotent")
			})
		}
	}
}

// TestGrowingNumbers covers documents whose canonical form is much longer
// than they are, which are read directly only until the output reaches
// twice the input, then again in two passes.
func TestGrowingNumbers(t *testing.T) {
	for _, n := range []int{1, 10, 100, 10000} {
		src := "[" + strings.Repeat("1e20,", n) + "-1.5e-7]"
		want := "[" + strings.Repeat("100000000000000000000,", n) + "-1.5e-7]"
		require.Equal(t, want, canonical(t, src, canon.Options{}))
		require.Equal(t, want, canonical(t, " "+src, canon.Options{}))
	}
}

func TestEquivalentBodies(t *testing.T) {
	tests := []struct {
		name string
		a, b string
	}{
		{"reordered", `{"amount":100,"currency":"EUR","to":"acct_1"}`, `{"to":"acct_1","amount":100,"currency":"EUR"}`},
		{"reindented", `{"a":{"b":[1,2,{"c":"d"}]}}`, "{\n  \"a\": {\n    \"b\": [\n      1,\n      2,\n      {\n        \"c\": \"d\"\n      }\n    ]\n  }\n}\n"},
		{"reordered nested", `{"o":{"x":1,"y":[{"q":1,"p":2}]},"n":0}`, `{"n":0,"o":{"y":[{"p":2,"q":1}],"x":1}}`},
		{"escaped name", `{"name":"x"}`, `{"\u006eame":"x"}`},
		{"escaped value", `{"v":"é/"}`, `{"v":"\u00e9\/"}`},
		{"number spelling", `{"v":1.0}`, `{"v":1}`},
		{"negative zero", `{"v":-0}`, `{"v":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, canonical(t, tt.a, canon.Options{}), canonical(t, tt.b, canon.Options{}))
		})
	}
}

func TestDifferentBodies(t *testing.T) {
	base := `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":"x"}`
	tests := []struct {
		name  string
		other string
	}{
		{"changed number", `{"amount":101,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":"x"}`},
		{"changed string", `{"amount":100,"currency":"USD","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":"x"}`},
		{"changed nested", `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":3}],"note":"x"}`},
		{"reordered array", `{"amount":100,"currency":"EUR","items":[{"sku":"b","qty":2},{"sku":"a","qty":1}],"note":"x"}`},
		{"number as string", `{"amount":"100","currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":"x"}`},
		{"missing member", `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}]}`},
		{"extra member", `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":"x","y":null}`},
		{"null for value", `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":null}`},
		{"renamed member", `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"Note":"x"}`},
		{"string case", `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":"X"}`},
		{"trailing space in string", `{"amount":100,"currency":"EUR","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"note":"x "}`},
	}
	want := canonical(t, base, canon.Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NotEqual(t, want, canonical(t, tt.other, canon.Options{}))
		})
	}

	pairs := []struct{ a, b string }{
		{`12345678901234567890123`, `12345678901234567890124`},
		{`0.1000000000000000000000000001`, `0.1`},
		{`1e400`, `1e401`},
		{`9007199254740993`, `9007199254740992`},
		{`-1`, `1`},
		{`1e-7`, `1e7`},
		{`"é"`, `"e\u0301"`},
		{`"\u0000"`, `""`},
		{`[1,2]`, `[[1,2]]`},
		{`{}`, `[]`},
		{`""`, `null`},
		{`true`, `"true"`},
	}
	for _, p := range pairs {
		t.Run(p.a+" vs "+p.b, func(t *testing.T) {
			require.NotEqual(t, canonical(t, p.a, canon.Options{}), canonical(t, p.b, canon.Options{}))
		})
	}
}

func requireErr(t *testing.T, err, sentinel error, offset int64) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	for _, other := range []error{canon.ErrSyntax, canon.ErrDepth, canon.ErrDuplicateKey} {
		if other != sentinel {
			require.NotErrorIs(t, err, other)
		}
	}
	var se *canon.SyntaxError
	require.ErrorAs(t, err, &se)
	if offset >= 0 {
		require.Equal(t, offset, se.Offset, "offset in %v", err)
	}
}

func TestDuplicateKey(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		offset int64
	}{
		{"top level", `{"a":1,"a":2}`, 7},
		{"same value", `{"a":1,"b":0,"a":1}`, 13},
		{"not adjacent", `{"b":1,"a":2,"c":3,"b":4}`, 19},
		{"escaped spelling", `{"a":1,"\u0061":2}`, 7},
		{"escaped both", `{"\u00e9":1,"é":2}`, 12},
		{"nested object", `{"x":{"k":1,"k":2}}`, 12},
		{"inside array", `[1,{"y":0,"k":1,"k":2}]`, 16},
		{"deep", `{"a":{"b":[{"c":{"d":1,"d":1}}]}}`, 23},
		{"empty name", `{"":1,"":2}`, 6},
		{"different values", `{"a":{"x":1},"a":[1]}`, 13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := both(t, []byte(tt.in), canon.Options{})
			require.Nil(t, out)
			requireErr(t, err, canon.ErrDuplicateKey, tt.offset)
		})
	}
	t.Run("omitted member still checked", func(t *testing.T) {
		_, err := both(t, []byte(`{"ts":1,"ts":2,"a":3}`), canon.Options{Omit: []string{"ts"}})
		requireErr(t, err, canon.ErrDuplicateKey, 8)
	})
	t.Run("same name in sibling objects is fine", func(t *testing.T) {
		require.Equal(t, `[{"a":1},{"a":2}]`, canonical(t, `[{"a":1},{"a":2}]`, canon.Options{}))
		require.Equal(t, `{"a":{"a":{"a":1}}}`, canonical(t, `{"a":{"a":{"a":1}}}`, canon.Options{}))
	})
}

func TestDepth(t *testing.T) {
	nest := func(n int, open, close string) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	t.Run("default limit", func(t *testing.T) {
		canonical(t, nest(canon.DefaultMaxDepth, "[", "]"), canon.Options{})
		canonical(t, nest(canon.DefaultMaxDepth, `{"a":`, "}"), canon.Options{})
		_, err := both(t, []byte(nest(canon.DefaultMaxDepth+1, "[", "]")), canon.Options{})
		requireErr(t, err, canon.ErrDepth, canon.DefaultMaxDepth)
		_, err = both(t, []byte(nest(canon.DefaultMaxDepth+1, `{"a":`, "}")), canon.Options{})
		requireErr(t, err, canon.ErrDepth, 5*canon.DefaultMaxDepth)
	})
	t.Run("custom limit", func(t *testing.T) {
		canonical(t, `[[1]]`, canon.Options{MaxDepth: 2})
		_, err := both(t, []byte(`[[[1]]]`), canon.Options{MaxDepth: 2})
		requireErr(t, err, canon.ErrDepth, 2)
		_, err = both(t, []byte(`[{}]`), canon.Options{MaxDepth: 1})
		requireErr(t, err, canon.ErrDepth, 1)
		require.Equal(t, `1`, canonical(t, `1`, canon.Options{MaxDepth: 1}))
		canonical(t, nest(canon.DefaultMaxDepth, "[", "]"), canon.Options{MaxDepth: -1})
	})
	t.Run("bomb", func(t *testing.T) {
		// Refused where the limit is passed, having built nothing in
		// proportion to the input (1 to 6 MB): no clock needed.
		for _, open := range []string{"[", `{"a":`, `[{"a":`} {
			bomb := []byte(strings.Repeat(open, 1_000_000))
			var err error
			alloc := allocatedBy(func() { _, err = canon.JSON(bomb, canon.Options{}) })
			requireErr(t, err, canon.ErrDepth, nthBracket(bomb, canon.DefaultMaxDepth+1))
			require.Less(t, alloc, uint64(64<<10), "allocated for %q", open)
		}
	})
	t.Run("deep input under a high limit", func(t *testing.T) {
		// No recursion: a million levels fit in a 4 MiB goroutine stack,
		// where a recursive reader would need hundreds of megabytes and
		// crash the test, and the memory is linear in the depth. There is
		// no wall-clock bound (a fixed 10 s took 15.9 s on a loaded 2-core
		// machine): the work is linear too, and quadratic work on a million
		// levels would outlast the test binary's timeout by far.
		const depth = 1_000_000
		opts := canon.Options{MaxDepth: depth}
		arrays := []byte(nest(depth, "[", "]"))
		objects := []byte(nest(depth/10, `{"b":0,"a":`, "}"))
		var out, out2 []byte
		var err, err2 error
		alloc := allocatedBy(func() {
			old := debug.SetMaxStack(4 << 20)
			defer debug.SetMaxStack(old)
			out, err = canon.JSON(arrays, opts)
			_, err2 = canon.JSON(arrays[:depth], opts)
			out2, _ = canon.JSON(objects, opts)
		})
		require.NoError(t, err)
		require.Equal(t, string(arrays), string(out))
		requireErr(t, err2, canon.ErrSyntax, depth)
		require.True(t, strings.HasPrefix(string(out2), `{"a":{"a":`))
		// 2.1 million levels in all: a few hundred bytes a level, with
		// slices grown by append.
		require.Less(t, alloc, uint64(512*depth*21/10), "%d bytes allocated", alloc)
	})
}

// nthBracket returns the offset of the nth '[' or '{' in s.
func nthBracket(s []byte, n int) int64 {
	for i, c := range s {
		if c == '[' || c == '{' {
			if n--; n == 0 {
				return int64(i)
			}
		}
	}
	return -1
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		offset int64
	}{
		{"empty", ``, 0},
		{"whitespace only", " \n\t ", 4},
		{"truncated object", `{"a":1`, 6},
		{"truncated name", `{"a`, 3},
		{"truncated after name", `{"a"`, 4},
		{"truncated after colon", `{"a":`, 5},
		{"truncated array", `[1,2`, 4},
		{"truncated string", `"abc`, 4},
		{"truncated escape", `"\`, 2},
		{"truncated unicode escape", `"\u00`, 1},
		{"truncated literal", `tru`, 3},
		{"truncated number", `-`, 1},
		{"trailing comma object", `{"a":1,}`, 7},
		{"trailing comma array", `[1,2,]`, 5},
		{"leading comma", `[,1]`, 1},
		{"double comma", `[1,,2]`, 3},
		{"missing comma", `[1 2]`, 3},
		{"missing colon", `{"a" 1}`, 5},
		{"missing value", `{"a":}`, 5},
		{"unquoted name", `{a:1}`, 1},
		{"number name", `{1:1}`, 1},
		{"single quotes", `{'a':1}`, 1},
		{"single quoted value", `['a']`, 1},
		{"NaN", `NaN`, 0},
		{"Infinity", `-Infinity`, 1},
		{"leading zero", `01`, 1},
		{"leading zero negative", `-01`, 2},
		{"leading zero in array", `[00]`, 2},
		{"trailing dot", `1.`, 2},
		{"leading dot", `.5`, 0},
		{"plus sign", `+1`, 0},
		{"bare exponent", `1e`, 2},
		{"exponent sign only", `1e+`, 3},
		{"hex", `0x10`, 1},
		{"unescaped newline", "\"a\nb\"", 2},
		{"unescaped tab", "\"a\tb\"", 2},
		{"unescaped NUL", "\"\x00\"", 1},
		{"bad escape", `"\x41"`, 1},
		{"bad unicode escape", `"\u00g0"`, 1},
		{"uppercase U escape", `"\U0041"`, 1},
		{"lone high surrogate", `"\ud800"`, 1},
		{"lone high surrogate then text", `"\ud800abcdef"`, 1},
		{"high surrogate then non-surrogate", `"\ud800\u0041"`, 1},
		{"two high surrogates", `"\ud800\ud800"`, 1},
		{"lone low surrogate", `"\udc00"`, 1},
		{"invalid UTF-8", "\"\xff\"", 1},
		{"truncated UTF-8", "\"\xc3\"", 1},
		{"overlong UTF-8", "\"\xc0\xaf\"", 1},
		{"UTF-8 surrogate", "\"\xed\xa0\x80\"", 1},
		{"invalid UTF-8 after escape", "\"\\n\xff\"", 3},
		{"invalid UTF-8 in name", "{\"\xff\":1}", 2},
		{"trailing garbage", `{} x`, 3},
		{"two values", `1 2`, 2},
		{"two objects", `{}{}`, 2},
		{"unclosed array in object", `{"a":[1}`, 7},
		{"mismatched brackets", `[}`, 1},
		{"capitalised literal", `True`, 0},
		{"literal with suffix", `nullx`, 4},
		{"comment", `{"a":1 /* c */}`, 7},
		{"BOM", "\ufeff{}", 0},
		{"non-breaking space", "\u00a0{}", 0},
		{"vertical tab", "\v{}", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := both(t, []byte(tt.in), canon.Options{})
			require.Nil(t, out)
			requireErr(t, err, canon.ErrSyntax, tt.offset)
			if utf8.ValidString(tt.in) && !strings.Contains(tt.in, `\ud`) {
				require.False(t, json.Valid([]byte(tt.in)), "encoding/json accepts it")
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := both(t, []byte(`{"secret-name":1,"secret-name":2}`), canon.Options{})
	require.EqualError(t, err, "canon: duplicate object member name at offset 17")
	_, err = both(t, []byte(`[1,]`), canon.Options{})
	require.EqualError(t, err, "canon: invalid character ']' looking for beginning of value at offset 3")
	_, err = both(t, []byte("\x01"), canon.Options{})
	require.EqualError(t, err, "canon: invalid byte 0x1 looking for beginning of value at offset 0")
	_, err = both(t, []byte(`[[[`), canon.Options{MaxDepth: 2})
	require.EqualError(t, err, "canon: nesting deeper than 2 at offset 2")
	var se *canon.SyntaxError
	require.ErrorAs(t, err, &se)
	require.Equal(t, canon.ErrDepth, se.Err)
	require.Equal(t, int64(2), se.Offset)
}

func TestOmit(t *testing.T) {
	doc := `{"ts":1,"a":{"ts":2,"b":{"ts":3,"c":4}},"list":[{"ts":5}],"x.y":6,"x":{"y":7,"z":8}}`
	tests := []struct {
		name string
		omit []string
		in   string
		want string
	}{
		{"none", nil, doc, `{"a":{"b":{"c":4,"ts":3},"ts":2},"list":[{"ts":5}],"ts":1,"x":{"y":7,"z":8},"x.y":6}`},
		{"top level only", []string{"ts"}, doc, `{"a":{"b":{"c":4,"ts":3},"ts":2},"list":[{"ts":5}],"x":{"y":7,"z":8},"x.y":6}`},
		{"nested path", []string{"a.ts"}, doc, `{"a":{"b":{"c":4,"ts":3}},"list":[{"ts":5}],"ts":1,"x":{"y":7,"z":8},"x.y":6}`},
		{"deeper path", []string{"a.b.ts"}, doc, `{"a":{"b":{"c":4},"ts":2},"list":[{"ts":5}],"ts":1,"x":{"y":7,"z":8},"x.y":6}`},
		{"several", []string{"ts", "a.b.ts", "a.ts"}, doc, `{"a":{"b":{"c":4}},"list":[{"ts":5}],"x":{"y":7,"z":8},"x.y":6}`},
		{"whole subtree", []string{"a"}, doc, `{"list":[{"ts":5}],"ts":1,"x":{"y":7,"z":8},"x.y":6}`},
		{"dotted path is not a dotted name", []string{"x.y"}, doc, `{"a":{"b":{"c":4,"ts":3},"ts":2},"list":[{"ts":5}],"ts":1,"x":{"z":8},"x.y":6}`},
		{"arrays not entered", []string{"list.ts"}, doc, `{"a":{"b":{"c":4,"ts":3},"ts":2},"list":[{"ts":5}],"ts":1,"x":{"y":7,"z":8},"x.y":6}`},
		{"path into scalar", []string{"ts.x"}, doc, `{"a":{"b":{"c":4,"ts":3},"ts":2},"list":[{"ts":5}],"ts":1,"x":{"y":7,"z":8},"x.y":6}`},
		{"no such member", []string{"nope", "a.nope"}, doc, `{"a":{"b":{"c":4,"ts":3},"ts":2},"list":[{"ts":5}],"ts":1,"x":{"y":7,"z":8},"x.y":6}`},
		{"everything nameable", []string{"a", "list", "ts", "x", "x.y"}, doc, `{"x.y":6}`},
		{"decoded names match", []string{"ts"}, `{"\u0074s":1,"b":2}`, `{"b":2}`},
		{"first member", []string{"a"}, `{"a":1,"b":2,"c":3}`, `{"b":2,"c":3}`},
		{"middle member", []string{"b"}, `{"a":1,"b":2,"c":3}`, `{"a":1,"c":3}`},
		{"last member", []string{"c"}, `{"a":1,"b":2,"c":3}`, `{"a":1,"b":2}`},
		{"only member", []string{"a"}, `{"a":[1,{"b":2}]}`, `{}`},
		{"top-level array", []string{"a"}, `[{"a":1}]`, `[{"a":1}]`},
		{"top-level scalar", []string{"a"}, `"a"`, `"a"`},
		{"empty name", []string{""}, `{"":1,"a":2}`, `{"a":2}`},
		{"prefix is not a match", []string{"t"}, `{"ts":1}`, `{"ts":1}`},
		{"longer name is not a match", []string{"ts"}, `{"t":1,"tss":2}`, `{"t":1,"tss":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := canonical(t, tt.in, canon.Options{Omit: tt.omit})
			require.Equal(t, tt.want, got)
		})
	}
	t.Run("omitted value still validated", func(t *testing.T) {
		_, err := both(t, []byte(`{"ts":01}`), canon.Options{Omit: []string{"ts"}})
		requireErr(t, err, canon.ErrSyntax, 7)
		_, err = both(t, []byte(`{"ts":[[[1]]]}`), canon.Options{MaxDepth: 3, Omit: []string{"ts"}})
		requireErr(t, err, canon.ErrDepth, 8)
	})
	t.Run("timestamp ignored", func(t *testing.T) {
		opts := canon.Options{Omit: []string{"client_ts"}}
		a := canonical(t, `{"amount":5,"client_ts":"2024-01-01T00:00:00Z"}`, opts)
		b := canonical(t, `{"client_ts":"2024-06-30T12:00:00Z","amount":5}`, opts)
		require.Equal(t, a, b)
	})
}

func TestAppendJSON(t *testing.T) {
	dst := []byte("prefix:")
	out, err := canon.AppendJSON(dst, []byte(`{"b":[1.0],"a":"\u00e9"}`), canon.Options{})
	require.NoError(t, err)
	require.Equal(t, `prefix:{"a":"é","b":[1]}`, string(out))

	out, err = canon.AppendJSON(dst, []byte(`{"b":`), canon.Options{})
	require.ErrorIs(t, err, canon.ErrSyntax)
	require.Equal(t, "prefix:", string(out))

	out, err = canon.AppendJSON(nil, []byte(`null`), canon.Options{})
	require.NoError(t, err)
	require.Equal(t, "null", string(out))
}

func TestResultIsExactSizeAndFresh(t *testing.T) {
	src := []byte(`{"b":1e3,"a":"x\u0001","c":[true,-0,{}]}`)
	out, err := canon.JSON(src, canon.Options{})
	require.NoError(t, err)
	require.Equal(t, len(out), cap(out))
	out2, err := canon.JSON(src, canon.Options{})
	require.NoError(t, err)
	out[0] = 'X'
	require.Equal(t, `{"a":"x\u0001","b":1000,"c":[true,0,{}]}`, string(out2))
	require.Equal(t, `{"b":1e3,"a":"x\u0001","c":[true,-0,{}]}`, string(src), "input modified")
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	src := benchDoc()
	want, err := canon.JSON(src, canon.Options{})
	require.NoError(t, err)
	opts := canon.Options{Omit: []string{"client_timestamp"}}
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = canon.JSON(src, opts)
	})
	require.LessOrEqual(t, allocs, 1.0)
	buf := make([]byte, 0, 2*len(want))
	allocs = testing.AllocsPerRun(100, func() {
		_, _ = canon.AppendJSON(buf[:0], src, canon.Options{})
	})
	require.Zero(t, allocs)
	allocs = testing.AllocsPerRun(100, func() {
		_, _ = canon.AppendJSONTwoPass(buf[:0], src, opts)
	})
	require.Zero(t, allocs)
	h := sha256.New()
	for _, write := range []func(io.Writer, []byte, canon.Options) (int64, error){canon.WriteJSONDirect, canon.WriteJSONTwoPass} {
		allocs = testing.AllocsPerRun(100, func() {
			h.Reset()
			_, _ = write(h, src, opts)
		})
		require.Zero(t, allocs)
	}
}

func TestConcurrent(t *testing.T) {
	docs := []string{
		`{"b":1,"a":[1,2,{"d":"\u00e9","c":null}]}`,
		`[1.50,{"z":{"y":{"x":[]}}}]`,
		string(benchDoc()),
		`{"a":1,"a":2}`,
	}
	want := make([]string, len(docs))
	for i, d := range docs {
		out, err := canon.JSON([]byte(d), canon.Options{})
		want[i] = string(out) + fmt.Sprint(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := (g + i) % len(docs)
				out, err := canon.JSON([]byte(docs[k]), canon.Options{})
				if got := string(out) + fmt.Sprint(err); got != want[k] {
					t.Errorf("doc %d: got %s, want %s", k, got, want[k])
					return
				}
			}
		})
	}
	wg.Wait()
}

func ExampleJSON() {
	a, _ := canon.JSON([]byte(`{"amount": 1.50, "to": "acct_1", "ts": 1700000000}`), canon.Options{Omit: []string{"ts"}})
	b, _ := canon.JSON([]byte("{\n  \"to\": \"\\u0061cct_1\",\n  \"amount\": 15e-1\n}"), canon.Options{Omit: []string{"ts"}})
	fmt.Println(string(a))
	fmt.Println(bytes.Equal(a, b))
	_, err := canon.JSON([]byte(`{"to":"a","to":"b"}`), canon.Options{})
	fmt.Println(errors.Is(err, canon.ErrDuplicateKey))
	// Output:
	// {"amount":1.5,"to":"acct_1"}
	// true
	// true
}

// benchDoc is a typical request body of about 1 KiB.
func benchDoc() []byte {
	return []byte(`{
  "idempotency_note": "retry of order placement",
  "customer": {
    "id": "cus_9f8e7d6c5b4a",
    "email": "jane.doe@example.com",
    "name": "Jane Doe",
    "address": {"line1": "12 Rue de l'\u00c9glise", "city": "Paris", "postal_code": "75004", "country": "FR"}
  },
  "amount": 129.90,
  "currency": "EUR",
  "client_timestamp": "2024-05-17T10:21:33.123Z",
  "items": [
    {"sku": "SKU-1001", "name": "Coffee beans 1kg", "quantity": 2, "unit_price": 24.50, "tags": ["food", "coffee"]},
    {"sku": "SKU-2040", "name": "Ceramic mug", "quantity": 1, "unit_price": 12.00, "tags": ["kitchen"]},
    {"sku": "SKU-3300", "name": "Grinder \"Pro\"", "quantity": 1, "unit_price": 68.90, "tags": []}
  ],
  "shipping": {"method": "express", "price": 0, "eta_days": 2, "tracking": null},
  "metadata": {"campaign": "spring-sale", "ab_bucket": 7, "referrer": "https:\/\/example.com\/promo?x=1&y=2", "gift": false},
  "payment": {"type": "card", "card": {"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2027}, "3ds": true},
  "order_id": 123456789012345678901
}`)
}

func BenchmarkJSON(b *testing.B) {
	src := benchDoc()
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := canon.JSON(src, canon.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	src := benchDoc()
	buf := make([]byte, 0, 2*len(src))
	opts := canon.Options{Omit: []string{"client_timestamp"}}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := canon.AppendJSON(buf[:0], src, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodingJSONRoundTrip is a reference point: decoding into any and
// encoding again (which loses duplicates and number precision).
func BenchmarkEncodingJSONRoundTrip(b *testing.B) {
	src := benchDoc()
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		var v any
		if err := json.Unmarshal(src, &v); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzCanonical checks the properties of the canonical form on arbitrary
// input. Seeds are in testdata/fuzz/FuzzCanonical as well as below.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1,2,{"d":"\u00e9","c":null}]}`,
		`[1.50,-0,1e400,12345678901234567890123,0.0000001]`,
		`"\ud83d\ude00\/\n"`,
		`{"a":1,"a":2}`,
		`{"ts":{"ts":1},"x":[{"ts":2}]}`,
		`[[[[[[[[[[]]]]]]]]]]`,
		` true `,
		`{"a" 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Add(benchDoc())
	f.Fuzz(func(t *testing.T, x []byte) {
		out, err := both(t, x, canon.Options{})
		valid := json.Valid(x)
		if err != nil {
			require.Nil(t, out)
			var se *canon.SyntaxError
			require.ErrorAs(t, err, &se)
			require.True(t, se.Offset >= 0 && se.Offset <= int64(len(x)), "offset %d out of range", se.Offset)
			switch {
			case errors.Is(err, canon.ErrSyntax):
				// Valid JSON is refused only for bad UTF-8 or surrogates.
				if valid {
					require.True(t, !utf8.Valid(x) || hasSurrogateEscape(x), "valid JSON refused: %v", err)
				}
			case errors.Is(err, canon.ErrDuplicateKey):
				// Found when the object closes, perhaps before a syntax
				// error later on.
				if valid {
					require.True(t, hasDuplicateKey(t, x), "no duplicate in input: %v", err)
				}
			case errors.Is(err, canon.ErrDepth):
				require.Greater(t, bytes.Count(x, []byte("["))+bytes.Count(x, []byte("{")), canon.DefaultMaxDepth)
			default:
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			// Omitting members never turns bad input into good.
			_, err2 := both(t, x, canon.Options{Omit: []string{"a", "b.c"}})
			require.Error(t, err2)
			return
		}

		require.True(t, valid, "accepted invalid JSON")
		require.True(t, json.Valid(out), "output is not valid JSON: %q", out)
		require.True(t, utf8.Valid(out))
		require.Equal(t, len(out), cap(out), "size precomputation is off")

		again, err := both(t, out, canon.Options{})
		require.NoError(t, err)
		require.Equal(t, string(out), string(again), "not idempotent")

		// Re-indenting does not change the canonical form.
		var ind bytes.Buffer
		require.NoError(t, json.Indent(&ind, x, "\t", "  "))
		fromIndented, err := both(t, ind.Bytes(), canon.Options{})
		require.NoError(t, err)
		require.Equal(t, string(out), string(fromIndented))

		// Same value as the input, per encoding/json.
		vx, vo := decode(t, x), decode(t, out)
		require.True(t, sameValue(vx, vo), "value changed: %s -> %s", x, out)

		// Omit removes exactly the named members.
		omit := []string{"a", "b.c"}
		withOmit, err := both(t, x, canon.Options{Omit: omit})
		require.NoError(t, err)
		require.True(t, json.Valid(withOmit))
		if m, ok := vo.(map[string]any); ok {
			delete(m, "a")
			if b, ok := m["b"].(map[string]any); ok {
				delete(b, "c")
			}
		}
		require.True(t, sameValue(vo, decode(t, withOmit)), "omit: %s -> %s", x, withOmit)
	})
}

func decode(t *testing.T, data []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

// sameValue compares values decoded by encoding/json with UseNumber, numbers
// by exact value.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !sameValue(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		return ok && sameNumber(string(a), string(b))
	default:
		return a == b
	}
}

// sameNumber compares two JSON numbers exactly with math/big. Numbers with
// huge exponents are compared by mantissa digits and exponent instead.
func sameNumber(a, b string) bool {
	ra, okA := ratOf(a)
	rb, okB := ratOf(b)
	if okA && okB {
		return ra.Cmp(rb) == 0
	}
	return sciOf(a) == sciOf(b)
}

func splitExp(s string) (mant string, exp *big.Int) {
	exp = new(big.Int)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp.SetString(strings.TrimPrefix(s[i+1:], "+"), 10)
		s = s[:i]
	}
	return s, exp
}

func ratOf(s string) (*big.Rat, bool) {
	_, exp := splitExp(s)
	if exp.CmpAbs(big.NewInt(2000)) > 0 {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic("bad number " + s)
	}
	return r, true
}

// sciOf returns sign, significant digits and decimal exponent of s.
func sciOf(s string) string {
	mant, exp := splitExp(s)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	exp.Add(exp, big.NewInt(int64(len(intPart))))
	trimmed := strings.TrimLeft(digits, "0")
	exp.Sub(exp, big.NewInt(int64(len(digits)-len(trimmed))))
	trimmed = strings.TrimRight(trimmed, "0")
	if trimmed == "" {
		return "0"
	}
	return fmt.Sprintf("%t|%s|%s", neg, trimmed, exp.String())
}

func hasSurrogateEscape(x []byte) bool {
	lower := bytes.ToLower(x)
	for _, p := range []string{`\ud8`, `\ud9`, `\uda`, `\udb`, `\udc`, `\udd`, `\ude`, `\udf`} {
		if bytes.Contains(lower, []byte(p)) {
			return true
		}
	}
	return false
}

// hasDuplicateKey reports whether some object in the valid JSON x has two
// members with the same decoded name, using encoding/json's tokenizer.
func hasDuplicateKey(t *testing.T, x []byte) bool {
	d := json.NewDecoder(bytes.NewReader(x))
	type obj struct {
		names   map[string]bool
		wantKey bool
	}
	var stack []*obj
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return false
		}
		require.NoError(t, err)
		var top *obj
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.wantKey {
			if s, ok := tok.(string); ok {
				if top.names[s] {
					return true
				}
				top.names[s] = true
				top.wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &obj{names: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &obj{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				stack[len(stack)-1].wantKey = stack[len(stack)-1].names != nil
			}
			continue
		}
		if top != nil {
			top.wantKey = top.names != nil
		}
	}
}

// FuzzNumbers checks number canonicalisation against math/big and strconv:
// two numbers get the same canonical form exactly when they have the same
// value, and the canonical form parses to the same float64.
func FuzzNumbers(f *testing.F) {
	for _, p := range [][2]string{
		{"1", "1.0"}, {"1e2", "100"}, {"0.5", "5e-1"}, {"-0", "0"},
		{"1e21", "1000000000000000000000"}, {"123.456e-10", "1.23456e-8"},
		{"0.000001", "1e-6"}, {"-12.5E+3", "-12500"}, {"1e999999999999999999999", "10e999999999999999999998"},
		{"12345678901234567890123", "12345678901234567890124"}, {"0.1", "0.10000000000000000001"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, errA := both(t, []byte(a), canon.Options{})
		cb, errB := both(t, []byte(b), canon.Options{})
		if errA != nil || errB != nil || !isNumber(a) || !isNumber(b) {
			return
		}
		require.True(t, isNumber(string(ca)), "%q -> %q", a, ca)
		require.Equal(t, sciOf(a) == sciOf(b), string(ca) == string(cb), "%q -> %q, %q -> %q", a, ca, b, cb)
		require.True(t, sameNumber(a, string(ca)), "%q -> %q", a, ca)
		fa, _ := strconv.ParseFloat(a, 64)
		fc, _ := strconv.ParseFloat(string(ca), 64)
		require.Equal(t, fa, fc, "%q -> %q", a, ca)
	})
}

// isNumber reports whether s is a JSON number with no surrounding space.
func isNumber(s string) bool {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil && string(n) == s
}
