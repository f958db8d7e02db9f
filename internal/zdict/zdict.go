// Package zdict trains zstd dictionaries for idemkey's stored responses:
// idemkey dict train is its command line, and the memory measurements use
// it too.
//
// A dictionary is made of the byte strings that recur across its samples,
// so a dictionary trained on real response bodies holds fragments of them
// (field names, but also any customer name, address or token that recurs).
// Handle it like the data it was trained on.
package zdict

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/dict"
	"github.com/klauspost/compress/zstd"
)

// Options tune Train. The zero value gives the defaults.
type Options struct {
	// Size is the largest dictionary to build, in bytes. Small API bodies
	// gain little from more than a few KiB. Default: DefaultSize.
	Size int

	// ID is the dictionary's ID, which every response compressed with it
	// carries: never give two different dictionaries the same ID while
	// responses compressed with the older one may still be replayed. IDs
	// from 32768 to 65535 cost 2 bytes per stored response, larger ones 4.
	// Default: a random ID from 32768 to 65535.
	ID uint32

	// SampleBytes is how much of each sample the trainer reads: the
	// beginning of a body is what a dictionary helps most. Default: 32 KiB.
	SampleBytes int
}

// DefaultSize is the default Options.Size.
const DefaultSize = 16 << 10

// MinSamples is the fewest samples Train accepts: a dictionary learnt from
// fewer learns the samples, not their shape.
const MinSamples = 8

// Train builds a zstd dictionary from sample bodies: the samples should be
// representative responses of the routes it will serve, without duplicates.
// It fails with fewer than MinSamples samples of at least 8 bytes, or when
// the samples have too little in common to build one.
func Train(samples [][]byte, o Options) (d []byte, err error) {
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if o.SampleBytes == 0 {
		o.SampleBytes = 32 << 10
	}
	if o.Size < 256 || o.SampleBytes < 8 {
		return nil, fmt.Errorf("zdict: size %d under 256 bytes or sample bytes %d under 8", o.Size, o.SampleBytes)
	}
	if o.ID == 0 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		o.ID = 32768 + uint32(binary.LittleEndian.Uint16(b[:]))%32768
	}
	input := make([][]byte, 0, len(samples))
	for _, s := range samples {
		if len(s) >= 8 {
			input = append(input, s[:min(len(s), o.SampleBytes)])
		}
	}
	if len(input) < MinSamples {
		return nil, fmt.Errorf("zdict: %d samples of 8 bytes or more; at least %d are needed", len(input), MinSamples)
	}
	defer func() {
		// The builder is young and has failed on odd input before; a bad
		// sample set must be an error, not a crash.
		if p := recover(); p != nil {
			d, err = nil, fmt.Errorf("zdict: the samples could not be trained on: %v", p)
		}
	}()
	d, err = dict.BuildZstdDict(input, dict.Options{MaxDictSize: o.Size, HashBytes: 6, ZstdDictID: o.ID,
		ZstdDictCompat: true, ZstdLevel: zstd.SpeedFastest})
	if err != nil {
		return nil, fmt.Errorf("zdict: %w", err)
	}
	if _, err := zstd.NewWriter(nil, zstd.WithEncoderDict(d)); err != nil {
		return nil, fmt.Errorf("zdict: the trained dictionary does not load: %w", err)
	}
	return d, nil
}

// ErrTooFew is returned by Evaluate without samples.
var ErrTooFew = errors.New("zdict: no samples to evaluate")

// Evaluate compresses each sample alone, as stored responses are (fastest
// level, no checksum), with dictionary d or none (d == nil), and returns the
// total bytes before and after.
func Evaluate(d []byte, samples [][]byte) (raw, compressed int, err error) {
	if len(samples) == 0 {
		return 0, 0, ErrTooFew
	}
	opts := []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false),
		zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1)}
	if d != nil {
		opts = append(opts, zstd.WithEncoderDict(d))
	}
	enc, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		return 0, 0, fmt.Errorf("zdict: %w", err)
	}
	defer enc.Close()
	var buf []byte
	for _, s := range samples {
		buf = enc.EncodeAll(s, buf[:0])
		raw += len(s)
		compressed += min(len(s), len(buf)-4) // stored without the magic, and raw when that is smaller
	}
	return raw, compressed, nil
}
