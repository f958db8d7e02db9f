package storm

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

const checkUsageText = `Usage: idemkey check [--json] [--report FILE] [--ledger FILE] HISTORY...

Judges the history that 'idemkey storm --history' wrote, offline: the same
rules, the same report and the same exit status as the storm that wrote it.
Several histories (one per load generator of the same storm) are judged
together, as one storm, each shifted by the difference of its start time
from the earliest. A key is judged on all its attempts, whichever
operation or file they come from; the same file given twice is refused.

With --ledger FILE (JSON Lines, one line per side effect the service made:
{"key": "...", "effect": "charge"}), at most once is decided key by key from
the ledger: a key with two executions fails, an unproven key passes only
with exactly one. A ledger with keys the history does not have, or with
malformed effects, makes the verdict inconclusive.

Exit status: 0 pass (and no threshold broken), 1 fail, inconclusive or a
broken threshold, 2 usage error, a file that is not a history, or not a
single HTTP response in it.

Flags:
`

// CheckCommand runs "idemkey check" with args (the arguments after
// "check"), writing the report to stdout and diagnostics to stderr, and
// returns the process exit code, as Command does for the storm that wrote
// the histories: 0 pass, 1 fail or inconclusive (or a broken threshold), 2
// usage error. Flags may come before or after the files.
func CheckCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), checkUsageText)
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	reportFile := fs.String("report", "", "write the report as one self-contained HTML `file` (load mode)")
	ledgerFile := fs.String("ledger", "", "decide at most once key by key from this ledger `file` (JSON Lines)")
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "idemkey check: %s\n", fmt.Sprintf(format, a...))
		fmt.Fprintln(stderr, "Run 'idemkey check -h' for usage.")
		return 2
	}
	// Files and flags in any order: parse, take the files up to the next
	// flag, parse again.
	var files []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		rest = fs.Args()
		for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			files, rest = append(files, rest[0]), rest[1:]
		}
		if len(rest) == 0 {
			break
		}
	}
	if len(files) == 0 {
		return usageErr("no history file given")
	}
	var seen []os.FileInfo
	for _, name := range files {
		fi, err := os.Stat(name)
		if err != nil {
			return usageErr("%v", err)
		}
		for i, prev := range seen {
			if os.SameFile(fi, prev) {
				return usageErr("%s and %s: the same history given twice (its attempts would count twice)", files[i], name)
			}
		}
		seen = append(seen, fi)
	}
	var hs []*History
	for _, name := range files {
		h, err := readHistoryFile(name)
		if err != nil {
			return usageErr("%s: %v", name, err)
		}
		hs = append(hs, h)
	}
	h := hs[0]
	if len(hs) > 1 {
		var err error
		if h, err = MergeHistories(hs...); err != nil {
			return usageErr("%v", err)
		}
	}
	if *ledgerFile != "" {
		f, err := os.Open(*ledgerFile)
		if err != nil {
			return usageErr("--ledger: %v", err)
		}
		h.Ledger, err = ReadLedger(f)
		_ = f.Close()
		if err != nil {
			return usageErr("--ledger: %v", err)
		}
		if h.Ledger == nil {
			h.Ledger = []Effect{}
		}
	}
	if *reportFile != "" && h.Header.Settings.Mode != modeLoad {
		return usageErr("--report needs a load-mode history (a storm with --rate or --duration)")
	}
	rep, err := Check(h)
	if err != nil {
		return usageErr("%v", err)
	}
	if rep.Error != "" {
		fmt.Fprintf(stderr, "idemkey check: %s\n", rep.Error)
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey check: writing report: %v\n", err)
		return 2
	}
	if *reportFile != "" {
		if err := rep.WriteHTMLFile(*reportFile); err != nil {
			fmt.Fprintf(stderr, "idemkey check: --report: %v\n", err)
			return 2
		}
	}
	return rep.ExitCode()
}

// readHistoryFile reads the history file name.
func readHistoryFile(name string) (*History, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadHistory(f)
}
