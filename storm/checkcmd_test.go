package storm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func runCheck(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = CheckCommand(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// A storm's history, re-checked offline, gives the storm's report and
// exit status, in text and in JSON, the flags before or after the file.
func TestCheckCommandGivesTheStormsVerdict(t *testing.T) {
	srv := newNonIdempotentServer(t)
	dir := t.TempDir()
	history := filepath.Join(dir, "h.jsonl")
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			args := []string{"--url", srv.URL, "--keys", "3", "--dups", "2", "--history", history}
			checkArgs := []string{history}
			if format == "json" {
				args = append(args, "--json")
				checkArgs = append(checkArgs, "--json")
			}
			code, stdout, stderr := runCommand(t, args...)
			require.Equal(t, 1, code, stderr)
			require.Contains(t, stdout, "fail")
			checkCode, checkOut, checkErr := runCheck(checkArgs...)
			require.Equal(t, code, checkCode, checkErr)
			require.Equal(t, stdout, checkOut)
		})
	}
}

func TestCheckCommandJudgesSeveralHistoriesAsOne(t *testing.T) {
	srv, fake := newIdempotentServer(t)
	dir := t.TempDir()
	var files []string
	for i := range 2 {
		f := filepath.Join(dir, "h"+string(rune('a'+i))+".jsonl")
		code, _, stderr := runCommand(t, "--url", srv.URL, "--rate", "40", "--duration", "250ms", "--history", f)
		require.Equal(t, 0, code, stderr)
		files = append(files, f)
	}
	code, stdout, stderr := runCheck(append([]string{"--json"}, files...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"verdict":"pass"`)
	require.Contains(t, stdout, `"keys":20,`)
	require.Contains(t, stdout, `"keys_passed":20,`)
	require.Equal(t, 20, fake.Executions())
}

func TestCheckCommandLedgerDecidesKeyByKey(t *testing.T) {
	h := burst([]Attempt{
		att(ClassTimeout, 0, "", 0, 100).retried(),
		att(ClassOriginal, 201, "a", 110, 120).number(2),
		att(ClassReplay, 201, "a", 200, 201).probe(),
	})
	dir := t.TempDir()
	path := filepath.Join(dir, "h.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = h.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	code, stdout, _ := runCheck(path)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "verdict: INCONCLUSIVE (1 of 1 keys inconclusive, 1 of them unproven)")

	ledger := filepath.Join(dir, "ledger.jsonl")
	require.NoError(t, os.WriteFile(ledger, []byte(`{"key":"key-0","effect":"charge"}`+"\n"), 0o600))
	code, stdout, stderr := runCheck(path, "--ledger", ledger)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "ledger         1 side effects for 1 keys (0 of them not the history's)")
	require.Contains(t, stdout, "rules          at-most-once: 1 proven once by the ledger or the count")
	require.Contains(t, stdout, "verdict: PASS")

	require.NoError(t, os.WriteFile(ledger, []byte(`{"key":"key-0","effect":"charge"}`+"\n"+`{"key":"key-0","effect":"charge"}`+"\n"), 0o600))
	code, stdout, _ = runCheck("--ledger", ledger, path)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "key-0  [at-most-once] the ledger shows 2 executions")
	require.Contains(t, stdout, "verdict: FAIL (1 of 1 keys failed)")

	// A ledger of another run, or malformed: inconclusive, with the reason
	// (it passed, or was a usage error, before).
	require.NoError(t, os.WriteFile(ledger, []byte(`{"key":"key-0","effect":"charge"}`+"\n"+`{"key":"other-run","effect":"charge"}`+"\n"+
		`{"effect":"charge"}`+"\n"), 0o600))
	code, stdout, stderr = runCheck(path, "--ledger", ledger)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stdout, "ledger         3 side effects for 2 keys (1 of them not the history's), 1 malformed")
	require.Contains(t, stdout, `verdict: INCONCLUSIVE (the ledger disagrees with the history: 1 key not in the history ("other-run" first); 1 effect malformed (no usable key, or a negative attempt))`)
}

func TestCheckCommandUsageErrors(t *testing.T) {
	dir := t.TempDir()
	notHistory := filepath.Join(dir, "x.jsonl")
	require.NoError(t, os.WriteFile(notHistory, []byte(`{"hello":1}`+"\n"), 0o600))
	junk := filepath.Join(dir, "junk.txt")
	require.NoError(t, os.WriteFile(junk, []byte("key,effect\nk,charge\n"), 0o600))
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 1)})
	burstFile := filepath.Join(dir, "b.jsonl")
	f, err := os.Create(burstFile)
	require.NoError(t, err)
	_, err = h.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no file":           {nil, "no history file given"},
		"a missing file":    {[]string{filepath.Join(dir, "nope")}, "no such file"},
		"not a history":     {[]string{notHistory}, "the first line is not a history header"},
		"an unknown flag":   {[]string{"--nope", burstFile}, "flag provided but not defined"},
		"a missing ledger":  {[]string{burstFile, "--ledger", filepath.Join(dir, "nope")}, "--ledger"},
		"a ledger of junk":  {[]string{burstFile, "--ledger", junk}, "--ledger"},
		"HTML of a burst":   {[]string{burstFile, "--report", filepath.Join(dir, "r.html")}, "--report needs a load-mode history"},
		"mismatched storms": {[]string{burstFile, writeLoad(t, dir)}, "differs from the first"},
		"one file twice":    {[]string{burstFile, filepath.Join(dir, ".", "b.jsonl")}, "given twice"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCheck(tc.args...)
			require.Equal(t, 2, code)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
		})
	}
	code, stdout, _ := runCheck("-h")
	require.Equal(t, 0, code)
	require.Empty(t, stdout)
}

func writeLoad(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "load.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = loadHistory([]Attempt{att(ClassOriginal, 201, "a", 0, 1)}).WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path
}
