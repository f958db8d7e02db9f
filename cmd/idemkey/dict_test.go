package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/httpcore"
)

// writeBodies writes n payment bodies as files under a new directory.
func writeBodies(t *testing.T, n int) string {
	dir := t.TempDir()
	for i, b := range corpus.Payment.Bodies(77, n) {
		sub := filepath.Join(dir, fmt.Sprintf("route%d", i%3)) // nested directories are walked
		require.NoError(t, os.MkdirAll(sub, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("%04d.json", i)), b, 0o644))
	}
	return dir
}

func runDict(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = dictCommand(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDictTrain(t *testing.T) {
	samples := writeBodies(t, 300)
	out := filepath.Join(t.TempDir(), "payments.zstd")
	code, stdout, stderr := runDict("train", "--out", out, "--id", "40404", "--size", "8192", samples)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "dictionary ID 40404")
	require.Contains(t, stdout, "30 held-out samples")
	require.Contains(t, stdout, "fragments of the samples")

	st, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a dictionary holds fragments of the data")
	d, err := os.ReadFile(out)
	require.NoError(t, err)
	require.LessOrEqual(t, len(d), 8192+1024)
	id, err := httpcore.DictionaryID(d)
	require.NoError(t, err)
	require.EqualValues(t, 40404, id)

	// The dictionary works in the middleware's codec, and it pays.
	c, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: [][]byte{d}})
	require.NoError(t, err)
	body := corpus.Payment.Bodies(78, 1)[0]
	stored := c.Append(nil, nil, body, false)
	require.Less(t, len(stored), len(body)/2)
	r, err := c.Decode(201, stored)
	require.NoError(t, err)
	require.Equal(t, body, r.Body)

	// An existing dictionary is kept unless --force.
	code, _, stderr = runDict("train", "--out", out, samples)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--force")
	code, stdout, stderr = runDict("train", "--out", out, "--force", samples)
	require.Equal(t, 0, code, stderr)
	d2, err := os.ReadFile(out)
	require.NoError(t, err)
	id2, err := httpcore.DictionaryID(d2)
	require.NoError(t, err)
	require.GreaterOrEqual(t, id2, uint32(32768), "a random ID in 32768-65535: %s", stdout)
	require.Less(t, id2, uint32(65536))
}

func TestDictTrainErrors(t *testing.T) {
	empty := t.TempDir()
	few := t.TempDir()
	for i := range 3 {
		require.NoError(t, os.WriteFile(filepath.Join(few, fmt.Sprint(i)), []byte(fmt.Sprintf(`{"id":%d,"status":"ok"}`, i)), 0o644))
	}
	dup := t.TempDir()
	for i := range 20 {
		require.NoError(t, os.WriteFile(filepath.Join(dup, fmt.Sprint(i)), []byte(`{"the":"same body"}`), 0o644))
	}
	out := filepath.Join(t.TempDir(), "d.zstd")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: idemkey dict train"},
		{[]string{"-h"}, 0, "train"},
		{[]string{"untrain"}, 2, `unknown subcommand "untrain"`},
		{[]string{"train"}, 2, "at least one PATH"},
		{[]string{"train", "-h"}, 0, "fragments"},
		{[]string{"train", "--size", "10", empty}, 2, "--size 10"},
		{[]string{"train", "--id", "4294967296", empty}, 2, "--id"},
		{[]string{"train", "--out", out, empty}, 1, "no samples"},
		{[]string{"train", "--out", out, filepath.Join(empty, "missing")}, 1, "no such file"},
		{[]string{"train", "--out", out, few}, 1, "at least 8"},
		{[]string{"train", "--out", out, dup}, 1, "at least 8"}, // duplicates count once
	} {
		code, stdout, stderr := runDict(tc.args...)
		require.Equal(t, tc.code, code, "%v: %s%s", tc.args, stdout, stderr)
		require.Contains(t, stdout+stderr, tc.want, "%v", tc.args)
	}
	_, err := os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist, "a failed training writes nothing")
}
