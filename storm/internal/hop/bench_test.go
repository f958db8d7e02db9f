//go:build unix

package hop

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchRate is the rate at which BenchmarkHopAddedLatency sends, per
// path: the 1,000 operations a second.
const benchRate = 1000

// BenchmarkHopAddedLatency measures what an HTTP hop without a fault
// window open adds to a request's latency at 1,000 requests a second: each
// iteration sends for one second straight to a trivial handler and for one
// second through a hop to it, alternating which goes first, on the same
// open-loop schedule (a request every millisecond, sent when due whatever
// the earlier ones are doing) over keep-alive connections. It reports the
// p50 and p99 of both paths over all iterations, and their differences
// (added-…); and, since a busy machine stalls one second and not the next,
// the median over the iterations of each iteration's difference
// (median-added-…):
//
//	go test -run '^$' -bench HopAddedLatency -benchtime 20x ./storm/internal/hop/
//
// The handler, the hop and the client share the process, so the hop's CPU
// is taken from theirs, as it would be on a machine that runs the storm,
// its hops and the service together; the process's CPU per request on
// each path (…-cpu-µs/req: the client's and the handler's, and the hop's
// on its path) tells what the hop costs whatever else the machine runs.
func BenchmarkHopAddedLatency(b *testing.B) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"pay_1","status":"captured","amount":1250,"currency":"eur"}`)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()
	h, err := Listen(Spec{Name: "bench", Kind: HTTP, Listen: "127.0.0.1:0", Upstream: srv.URL}, nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	h.Begin(time.Now())

	// At most 64 connections a path: a stall of the machine makes the
	// requests due meanwhile wait for one, rather than dial hundreds.
	tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	paths := []struct {
		name, url string
		lat       []time.Duration
		cpu       time.Duration // the process's, while the path was sent to
	}{{name: "direct", url: srv.URL + "/v1/payments"}, {name: "hop", url: h.URL() + "/v1/payments"}}
	for _, p := range paths { // warm the connections
		if _, err := paced(client, p.url, 100*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	var added50, added99 []time.Duration // per iteration: hop's less direct's
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		var round [2][]time.Duration
		for _, k := range order {
			cpu := processCPU()
			lat, err := paced(client, paths[k].url, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			paths[k].cpu += processCPU() - cpu
			paths[k].lat = append(paths[k].lat, lat...)
			slices.Sort(lat)
			round[k] = lat
		}
		added50 = append(added50, pct(round[1], 50)-pct(round[0], 50))
		added99 = append(added99, pct(round[1], 99)-pct(round[0], 99))
	}
	b.StopTimer()
	slices.Sort(added50)
	slices.Sort(added99)
	direct, hop := paths[0].lat, paths[1].lat
	slices.Sort(direct)
	slices.Sort(hop)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(us(pct(direct, 50)), "direct-p50-µs")
	b.ReportMetric(us(pct(direct, 99)), "direct-p99-µs")
	b.ReportMetric(us(pct(hop, 50)), "hop-p50-µs")
	b.ReportMetric(us(pct(hop, 99)), "hop-p99-µs")
	b.ReportMetric(us(pct(hop, 50)-pct(direct, 50)), "added-p50-µs")
	b.ReportMetric(us(pct(hop, 99)-pct(direct, 99)), "added-p99-µs")
	b.ReportMetric(us(pct(added50, 50)), "median-added-p50-µs")
	b.ReportMetric(us(pct(added99, 50)), "median-added-p99-µs")
	b.ReportMetric(us(paths[0].cpu)/float64(len(direct)), "direct-cpu-µs/req")
	b.ReportMetric(us(paths[1].cpu)/float64(len(hop)), "hop-cpu-µs/req")
	b.ReportMetric(float64(len(hop)), "requests/path")
}

// paced sends POSTs to url at benchRate for d, each when due, and returns
// each one's latency (from when it was sent to the end of its answer).
func paced(client *http.Client, url string, d time.Duration) ([]time.Duration, error) {
	n := int(d.Seconds() * benchRate)
	every := time.Second / benchRate
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	begin := time.Now()
	for i := range n {
		if wait := time.Until(begin.Add(time.Duration(i) * every)); wait > 50*time.Microsecond {
			timer.Reset(wait)
			<-timer.C
		}
		wg.Go(func() {
			sent := time.Now()
			resp, err := client.Post(url, "application/json", strings.NewReader(`{"amount":1250,"currency":"eur"}`))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusCreated {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			lat[i] = time.Since(sent)
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return lat, <-errs
}

// processCPU returns the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pct returns the nearest-rank q-th percentile of sorted ds.
func pct(ds []time.Duration, q int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := (len(ds)*q + 99) / 100
	return ds[max(0, min(len(ds)-1, i-1))]
}
