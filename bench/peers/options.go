package peers

import (
	"errors"
	"io"
	"time"
)

// Options are the knobs of a run. DefaultOptions gives the defaults.
type Options struct {
	// Rounds is the number of alternating bare / idempotent rounds.
	Rounds int
	// Duration is the length of each throughput measurement.
	Duration time.Duration
	// Concurrency is the keep-alive clients of the throughput measurements.
	Concurrency int
	// ReplayKeys are stored first, then cycled over by the replay
	// measurement.
	ReplayKeys int
	// Keys x Dups storm requests, StormConcurrency at a time.
	Keys             int
	Dups             int
	StormConcurrency int
	// TwoInstances also storms two apps sharing the same Redis.
	TwoInstances bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// DefaultOptions returns 3 rounds of 2s, 64 clients, 1000 replay keys and a
// storm of 2000 keys x 10 duplicates at concurrency 128, on one and on two
// instances.
func DefaultOptions() Options {
	return Options{
		Rounds:           3,
		Duration:         2 * time.Second,
		Concurrency:      64,
		ReplayKeys:       1000,
		Keys:             2000,
		Dups:             10,
		StormConcurrency: 128,
		TwoInstances:     true,
	}
}

// Validate returns an error naming the first option out of range.
func (o Options) Validate() error {
	switch {
	case o.Rounds < 1:
		return errors.New("-rounds must be at least 1")
	case o.Duration <= 0:
		return errors.New("-duration must be positive")
	case o.Concurrency < 1 || o.StormConcurrency < 1:
		return errors.New("-concurrency and -storm-concurrency must be at least 1")
	case o.ReplayKeys < 1 || o.Keys < 1 || o.Dups < 1:
		return errors.New("-replay-keys, -keys and -dups must be at least 1")
	}
	return nil
}
