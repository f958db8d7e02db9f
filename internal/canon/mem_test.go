package canon_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/canon"
)

// bigBody is a shape of large document: gen returns one of at least n bytes.
type bigBody struct {
	name string
	gen  func(n int) []byte
}

// repeatArray builds a top-level array of elements from elem(i) until it
// holds at least n bytes.
func repeatArray(n int, elem func(i int) string) []byte {
	var b bytes.Buffer
	b.Grow(n + 1024)
	b.WriteByte('[')
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(elem(i))
	}
	b.WriteByte(']')
	return b.Bytes()
}

// bigBodies are the large documents the memory test and BenchmarkLarge use:
// typical request bodies scaled up, and the shapes that cost the most memory
// per input byte.
var bigBodies = []bigBody{
	{"typical", func(n int) []byte {
		doc := string(benchDoc())
		return repeatArray(n, func(int) string { return doc })
	}},
	{"small numbers", func(n int) []byte {
		return repeatArray(n, func(int) string { return "1" })
	}},
	{"small unsorted objects", func(n int) []byte {
		return repeatArray(n, func(int) string { return `{"b":0,"a":0}` })
	}},
	{"one wide unsorted object", func(n int) []byte {
		var b bytes.Buffer
		b.Grow(n + 64)
		b.WriteByte('{')
		for i := n / 8; b.Len() < n; i-- {
			if b.Len() > 1 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + strconv.FormatInt(int64(i), 36) + `":0`)
		}
		b.WriteByte('}')
		return b.Bytes()
	}},
	{"escaped strings", func(n int) []byte {
		return repeatArray(n, func(int) string { return `"\u00e9\n\ud83d\ude00\/x"` })
	}},
	{"nested", func(n int) []byte {
		const depth = canon.DefaultMaxDepth - 2 // inside the top-level array and around [true]
		one := strings.Repeat(`{"z":1,"a":`, depth) + "[true]" + strings.Repeat("}", depth)
		return repeatArray(n, func(int) string { return one })
	}},
	{"growing numbers", func(n int) []byte {
		// Each 5-byte 1e20 is 21 bytes in canonical form.
		return repeatArray(n, func(int) string { return "1e20" })
	}},
}

// measure runs f cold (two collections first empty the sync.Pools) and
// returns the peak of the live heap it added and the bytes it allocated.
//
// The peak is measured without any timing: the canonicaliser calls a test
// hook after each allocation of working memory, while the buffer it
// replaces is still referenced, and the hook forces a full collection and
// reads the live heap. The live heap only grows at allocations, so its
// highest sample is its peak. To keep the test quick (collections are slow
// under the race detector), allocations smaller than every bytes are not
// sampled, but their sizes are added to the peak, which so stays an upper
// bound. The bytes allocated (also an upper bound of the peak, which needs
// no hook) catch any allocation the hook misses.
func measure(every int, f func()) (peak, allocated uint64) {
	var before, after, ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	var unsampled uint64
	reset := canon.SetTestHook(func(size int) {
		if size < every {
			unsampled += uint64(size)
			return
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > before.HeapAlloc {
			peak = max(peak, ms.HeapAlloc-before.HeapAlloc)
		}
	})
	defer reset()
	f()
	runtime.ReadMemStats(&after)
	return peak + unsampled, after.TotalAlloc - before.TotalAlloc
}

// allocatedBy runs f cold and returns the bytes it allocated.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

const oneMiB = 1 << 20

// TestMemory holds the peak live memory of the canonicaliser under 4 bytes
// per input byte for documents of every shape in bigBodies: of 1 MiB, read
// in two passes, and of just under 64 KiB, read directly. The result is
// counted too, except where the canonical form itself is more than twice as
// long as the input (numbers such as 1e20, 21 digits in canonical form):
// there the memory besides the result is held to 4 bytes per input byte.
// The bytes allocated in all are held to 8 per input byte (the old code
// allocated 106 for an array of small numbers). See measure for how.
func TestMemory(t *testing.T) {
	for _, size := range []int{oneMiB, canon.DirectMax - 2048} {
		for _, bb := range bigBodies {
			t.Run(fmt.Sprintf("%d/%s", size, bb.name), func(t *testing.T) {
				src := bb.gen(size)
				require.Equal(t, size < canon.DirectMax, len(src) <= canon.DirectMax)
				perByte := func(n uint64) float64 { return float64(n) / float64(len(src)) }

				var out []byte
				var err error
				peak, alloc := measure(len(src)/64, func() { out, err = canon.JSON(src, canon.Options{}) })
				require.NoError(t, err)
				t.Logf("JSON: %d bytes in, %d out; per input byte: peak live %.2f, allocated %.2f",
					len(src), len(out), perByte(peak), perByte(alloc))
				if len(out) > 2*len(src) {
					peak -= uint64(cap(out))
					alloc -= uint64(cap(out))
				}
				require.Less(t, perByte(peak), 4.0)
				require.Less(t, perByte(alloc), 8.0)

				h := sha256.New()
				var written int64
				peak, alloc = measure(len(src)/64, func() { written, err = canon.WriteJSON(h, src, canon.Options{}) })
				require.NoError(t, err)
				t.Logf("WriteJSON: per input byte: peak live %.2f, allocated %.2f", perByte(peak), perByte(alloc))
				require.Less(t, perByte(peak), 4.0)
				require.Less(t, perByte(alloc), 8.0)
				require.Equal(t, int64(len(out)), written)
				want := sha256.Sum256(out)
				require.Equal(t, want[:], h.Sum(nil), "WriteJSON wrote other bytes than JSON returned")
			})
		}
	}
}

// BenchmarkLarge canonicalises 1 MiB documents of each shape in bigBodies,
// into a fresh result (JSON) and into a hash (WriteJSON), and reports the
// bytes allocated per input byte (alloc-B/B) and the allocations per MiB of
// input (allocs/MiB) along with the usual figures.
func BenchmarkLarge(b *testing.B) {
	for _, bb := range bigBodies {
		src := bb.gen(oneMiB)
		for _, fn := range []struct {
			name string
			f    func() error
		}{
			{"JSON", func() error { _, err := canon.JSON(src, canon.Options{}); return err }},
			{"WriteJSON", func() error { _, err := canon.WriteJSON(sha256.New(), src, canon.Options{}); return err }},
		} {
			b.Run(fmt.Sprintf("%s/%s", fn.name, bb.name), func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				b.ReportAllocs()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for b.Loop() {
					if err := fn.f(); err != nil {
						b.Fatal(err)
					}
				}
				runtime.ReadMemStats(&after)
				perOp := func(x uint64) float64 { return float64(x) / float64(b.N) }
				b.ReportMetric(perOp(after.TotalAlloc-before.TotalAlloc)/float64(len(src)), "alloc-B/B")
				b.ReportMetric(perOp(after.Mallocs-before.Mallocs)*oneMiB/float64(len(src)), "allocs/MiB")
			})
		}
	}
}
