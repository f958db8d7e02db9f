package httpcore

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/zdict"
)

// BenchmarkCodec is the CPU cost of storing (Append) and replaying (Decode)
// one response, per corpus, raw, compressed, and with a dictionary trained
// on other bodies of its kind.
//
//	go test -run '^$' -bench Codec -count 6 ./internal/httpcore
func BenchmarkCodec(b *testing.B) {
	for _, k := range []corpus.Kind{corpus.Small, corpus.Order, corpus.Payment, corpus.Large} {
		d, err := zdict.Train(k.Bodies(1, 1000), zdict.Options{ID: 40000})
		require.NoError(b, err)
		withDict, err := NewResponseCodec(Compression{Dictionaries: [][]byte{d}})
		require.NoError(b, err)
		zstdOnly, err := NewResponseCodec(Compression{On: true})
		require.NoError(b, err)
		samples := k.Samples(2, 100)
		for _, mode := range []struct {
			name string
			c    *ResponseCodec
		}{{"raw", nil}, {"zstd", zstdOnly}, {"zstd+dict", withDict}} {
			headers := make([]http.Header, len(samples))
			stored := make([][]byte, len(samples))
			size := 0
			for i, s := range samples {
				headers[i] = http.Header{"Content-Type": {"application/json; charset=utf-8"}, "Location": {s.Location}}
				stored[i] = mode.c.Append(nil, headers[i], s.Body, false)
				size += len(stored[i])
			}
			b.Run(k.Name+"/"+mode.name+"/append", func(b *testing.B) {
				b.ReportAllocs()
				b.ReportMetric(float64(size)/float64(len(samples)), "stored-B")
				for i := 0; b.Loop(); i++ {
					s := samples[i%len(samples)]
					_ = mode.c.Append(nil, headers[i%len(samples)], s.Body, false)
				}
			})
			b.Run(k.Name+"/"+mode.name+"/decode", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := mode.c.Decode(201, stored[i%len(stored)]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
