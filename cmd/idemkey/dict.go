package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/internal/zdict"
)

const dictAbout = `Subcommands:

  train   build a zstd dictionary for compressing stored responses from
          sample response bodies

Run 'idemkey dict train -h' for its flags.
`

const dictTrainAbout = `Builds a zstd dictionary from sample response bodies, for the
middleware's Options.Dictionaries. Each regular file under each PATH (a
directory, walked recursively, or a file) is one sample: one response body
as the handler wrote it. Give a few hundred to a few thousand bodies of the
routes the dictionary will serve; duplicates are dropped.

Every tenth sample is held out of training and compressed alone, as the
middleware stores a response, with and without the dictionary, and the
sizes are printed.

A dictionary is built from the byte strings its samples share: trained on
real responses, it holds fragments of them (names, addresses, tokens that
recur). Keep it, and the samples, as safe as that data: out of public
repositories and logs, with the same access rules.

The dictionary is written to --out with mode 0600; an existing file is
kept unless --force. Every response compressed with it carries its ID:
never give two different dictionaries the same --id while responses
compressed with the older one can still be replayed.

Exit status: 0 on success, 1 when the samples cannot be read or trained on,
2 on a usage error.
`

func dictCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintf(stderr, "Usage: idemkey dict train [flags] PATH...\n\n%s", dictAbout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "train":
		return dictTrain(ctx, args[1:], stdout, stderr)
	default:
		return usageError(stderr, "dict", "unknown subcommand %q; want train", args[0])
	}
}

func dictTrain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dict train", "[--out dictionary.zstd] [--force] [--size 16384] [--id N] [--sample-bytes 32768] PATH...", dictTrainAbout, stderr)
	var (
		out         = fs.String("out", "dictionary.zstd", "the dictionary `file` to write")
		force       = fs.Bool("force", false, "overwrite --out if it exists")
		size        = fs.Int("size", zdict.DefaultSize, "the largest dictionary to build, in `bytes`")
		id          = fs.Uint("id", 0, "the dictionary's `ID`, 1 to 4294967295; default a random one from 32768 to 65535 (2 bytes per stored response)")
		sampleBytes = fs.Int("sample-bytes", 32<<10, "how much of each sample to read, in `bytes` (the beginning matters most)")
	)
	paths, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	switch {
	case len(paths) == 0:
		return usageError(stderr, "dict train", "want at least one PATH of sample bodies")
	case *size < 256 || *size > 1<<20:
		return usageError(stderr, "dict train", "--size %d: want 256 to 1048576 bytes", *size)
	case *id > 1<<32-1:
		return usageError(stderr, "dict train", "--id %d: want 1 to 4294967295", *id)
	case *sampleBytes < 8:
		return usageError(stderr, "dict train", "--sample-bytes %d: want at least 8", *sampleBytes)
	}
	if !*force {
		if _, err := os.Stat(*out); err == nil {
			return usageError(stderr, "dict train", "%s exists; pass --force to overwrite it", *out)
		}
	}
	samples, err := readSamples(ctx, paths, *sampleBytes)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey dict train: %v\n", err)
		return 1
	}
	train, held := samples, [][]byte(nil)
	if len(samples) >= 2*zdict.MinSamples {
		train, held = nil, nil
		for i, s := range samples {
			if i%10 == 9 {
				held = append(held, s)
			} else {
				train = append(train, s)
			}
		}
	}
	d, err := zdict.Train(train, zdict.Options{Size: *size, ID: uint32(*id), SampleBytes: *sampleBytes})
	if err != nil {
		fmt.Fprintf(stderr, "idemkey dict train: %v\n", err)
		return 1
	}
	if err := writeSecret(*out, d, *force); err != nil {
		fmt.Fprintf(stderr, "idemkey dict train: %v\n", err)
		return 1
	}
	dictID, _ := httpcore.DictionaryID(d)
	total := 0
	for _, s := range samples {
		total += len(s)
	}
	fmt.Fprintf(stdout, "wrote %s: dictionary ID %d, %d bytes, from %d samples (%d bytes on average)\n",
		*out, dictID, len(d), len(train), total/len(samples))
	if len(held) > 0 {
		raw, plain, _ := zdict.Evaluate(nil, held)
		_, withDict, _ := zdict.Evaluate(d, held)
		fmt.Fprintf(stdout, "%d held-out samples, %d bytes on average: zstd alone %d (%.2fx), with the dictionary %d (%.2fx)\n",
			len(held), raw/len(held), plain/len(held), ratio(raw, plain), withDict/len(held), ratio(raw, withDict))
	}
	fmt.Fprintf(stdout, "It holds fragments of the samples: keep it as safe as they are.\n"+
		"Use it: httpmw.Options{Dictionaries: [][]byte{dict}} (or ginmw.Options), the new dictionary first,\n"+
		"the one it replaces after it until the store's Retention has passed.\n")
	return 0
}

// readSamples reads the beginning of every regular file under paths, in
// path order, dropping duplicates and empty files.
func readSamples(ctx context.Context, paths []string, limit int) ([][]byte, error) {
	var files []string
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if d.Type().IsRegular() {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(files)
	files = slices.Compact(files)
	seen := map[string]bool{}
	var samples [][]byte
	for _, name := range files {
		b, err := readHead(name, limit)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 || seen[string(b)] {
			continue
		}
		seen[string(b)] = true
		samples = append(samples, b)
	}
	if len(samples) == 0 {
		return nil, errors.New("no samples: the paths hold no non-empty regular files")
	}
	return samples, nil
}

func readHead(name string, limit int) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(limit)))
}

// writeSecret writes b to name with mode 0600, through a temporary file in
// the same directory, so that a failed write leaves no partial dictionary.
func writeSecret(name string, b []byte, overwrite bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), ".dict-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := io.Copy(tmp, bytes.NewReader(b)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if !overwrite {
		// Link fails if name appeared meanwhile, where Rename would replace it.
		return os.Link(tmp.Name(), name)
	}
	return os.Rename(tmp.Name(), name)
}

func ratio(raw, compressed int) float64 {
	if compressed == 0 {
		return 0
	}
	return float64(raw) / float64(compressed)
}
