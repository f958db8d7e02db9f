package faultproxy

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCommands(t *testing.T) {
	in := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" +
		"\r\n" + // empty inline line: skipped
		"PING hello\r\n" +
		"*0\r\n" + // empty array: skipped
		"*3\r\n$7\r\nEVALSHA\r\n$0\r\n\r\n$4\r\na\r\nb\r\n"
	f := frameReader{r: bufio.NewReader(strings.NewReader(in))}
	want := []struct {
		args []string
		raw  string
	}{
		{[]string{"GET", "k"}, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"},
		{[]string{"PING", "hello"}, "PING hello\r\n"},
		{[]string{"EVALSHA", "", "a\r\nb"}, "*3\r\n$7\r\nEVALSHA\r\n$0\r\n\r\n$4\r\na\r\nb\r\n"},
	}
	for _, w := range want {
		args, err := f.command()
		require.NoError(t, err)
		require.Equal(t, w.args, args)
		require.Equal(t, w.raw, string(f.buf))
	}
	_, err := f.command()
	require.ErrorIs(t, err, io.EOF)
}

func TestBadCommands(t *testing.T) {
	for _, in := range []string{
		"*1\r\n:1\r\n",           // not a bulk string
		"*1\r\n$-1\r\n",          // null argument
		"*x\r\n",                 // bad count
		"*1\r\n$3\r\nGETxx",      // no CRLF after the payload
		"PING\n",                 // no CR
		"*2000000\r\n",           // too many arguments
		"*1\r\n$99999999999\r\n", // too long
	} {
		f := frameReader{r: bufio.NewReader(strings.NewReader(in))}
		_, err := f.command()
		require.Error(t, err, "%q", in)
	}
}

func TestReplies(t *testing.T) {
	frames := []struct {
		raw  string
		push bool
	}{
		{"+OK\r\n", false},
		{"-ERR no\r\n", false},
		{":42\r\n", false},
		{"$5\r\nhello\r\n", false},
		{"$-1\r\n", false},
		{"*-1\r\n", false},
		{"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", false},
		{"%2\r\n+a\r\n:1\r\n+b\r\n*0\r\n", false},
		{"~1\r\n,1.5\r\n", false},
		{"_\r\n", false},
		{"#t\r\n", false},
		{"(12345678901234567890\r\n", false},
		{"=9\r\ntxt:hello\r\n", false},
		{"!3\r\nbad\r\n", false},
		{"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n", false}, // an attribute and its value: one reply
		{">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", true},
	}
	var in strings.Builder
	for _, f := range frames {
		in.WriteString(f.raw)
	}
	f := frameReader{r: bufio.NewReader(strings.NewReader(in.String()))}
	for _, w := range frames {
		push, err := f.reply()
		require.NoError(t, err, "%q", w.raw)
		require.Equal(t, w.push, push)
		require.Equal(t, w.raw, string(f.buf))
	}
	_, err := f.reply()
	require.ErrorIs(t, err, io.EOF)
}

func TestBadReplies(t *testing.T) {
	deep := strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n"
	for _, in := range []string{"?\r\n", "\r\n", "$3\r\nab\r\n", "*?\r\n", deep} {
		f := frameReader{r: bufio.NewReader(strings.NewReader(in))}
		_, err := f.reply()
		require.Error(t, err, "%q", in)
	}
}
