package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newServer starts a test server answering POST /ok with 201 and a small
// body, and counts the connections it accepts.
func newServer(t *testing.T) (*httptest.Server, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	var conns, hits atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"x"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns, &hits
}

func post(url string) func(int, int) (*http.Request, error) {
	return func(int, int) (*http.Request, error) {
		return http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":1}`))
	}
}

func TestMaxRequests(t *testing.T) {
	srv, conns, hits := newServer(t)
	var bodies atomic.Int64
	res, err := Run(t.Context(), Config{
		Concurrency: 8,
		MaxRequests: 500,
		Request:     post(srv.URL + "/ok"),
		Check: func(resp *http.Response, body []byte) error {
			if resp.StatusCode != http.StatusCreated {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			if string(body) != `{"id":"x"}` {
				return fmt.Errorf("body %q", body)
			}
			bodies.Add(1)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 500 || hits.Load() != 500 || bodies.Load() != 500 {
		t.Fatalf("requests %d, server hits %d, checked bodies %d; want 500 each", res.Requests, hits.Load(), bodies.Load())
	}
	if res.Errors != 0 || res.FirstError != nil {
		t.Fatalf("errors %d (%v)", res.Errors, res.FirstError)
	}
	if res.Status[http.StatusCreated] != 500 || len(res.Status) != 1 {
		t.Fatalf("status counts %v", res.Status)
	}
	// net/http may dial a spare connection when a worker's next request
	// races the return of its connection to the idle pool, but connections
	// must be reused, not opened per request.
	if c := conns.Load(); c > 16 {
		t.Fatalf("%d connections for 8 workers and 500 requests: keep-alive not reused", c)
	}
	if res.RPS <= 0 || res.Elapsed <= 0 {
		t.Fatalf("rps %v elapsed %v", res.RPS, res.Elapsed)
	}
	if !(0 < res.P50 && res.P50 <= res.P90 && res.P90 <= res.P99 && res.P99 <= res.Max) {
		t.Fatalf("percentiles not ordered: %v", res)
	}
}

func TestDurationAndUniqueSeq(t *testing.T) {
	srv, _, _ := newServer(t)
	var seen [4]atomic.Int64 // next expected seq per worker
	var bad atomic.Int64
	start := time.Now()
	res, err := Run(t.Context(), Config{
		Concurrency: 4,
		Duration:    150 * time.Millisecond,
		Request: func(worker, seq int) (*http.Request, error) {
			if int64(seq) != seen[worker].Add(1)-1 {
				bad.Add(1)
			}
			return post(srv.URL+"/ok")(worker, seq)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// At least the duration (start is taken before the run begins, so a
	// slow machine only lengthens it); that it ends at all is Run's
	// returning.
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("run took %v for a 150ms duration", d)
	}
	if bad.Load() != 0 {
		t.Fatalf("%d out-of-order seq values", bad.Load())
	}
	if res.Requests == 0 || res.Errors != 0 {
		t.Fatalf("requests %d errors %d", res.Requests, res.Errors)
	}
}

func TestCheckAndTransportErrors(t *testing.T) {
	srv, _, _ := newServer(t)
	res, err := Run(t.Context(), Config{
		Concurrency: 2,
		MaxRequests: 20,
		Request:     post(srv.URL + "/missing"),
		Check: func(resp *http.Response, _ []byte) error {
			if resp.StatusCode != http.StatusCreated {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 20 || res.Errors != 20 || res.Status[http.StatusNotFound] != 20 {
		t.Fatalf("got %v, status %v", res, res.Status)
	}
	if res.FirstError == nil || !strings.Contains(res.FirstError.Error(), "status 404") {
		t.Fatalf("first error %v", res.FirstError)
	}

	// A closed port gives transport errors, which have no status.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	res, err = Run(t.Context(), Config{Concurrency: 2, MaxRequests: 4, Request: post("http://" + addr + "/")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 4 || res.Errors != 4 || len(res.Status) != 0 || res.FirstError == nil {
		t.Fatalf("got %v, status %v, first error %v", res, res.Status, res.FirstError)
	}
}

func TestRequestErrorAborts(t *testing.T) {
	srv, _, _ := newServer(t)
	boom := errors.New("boom")
	res, err := Run(t.Context(), Config{
		Concurrency: 4,
		Duration:    10 * time.Second,
		Request: func(worker, seq int) (*http.Request, error) {
			if seq == 3 {
				return nil, boom
			}
			return post(srv.URL+"/ok")(worker, seq)
		},
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if res == nil || res.Requests == 0 || res.Elapsed > 5*time.Second {
		t.Fatalf("partial result %v", res)
	}
}

func TestCancel(t *testing.T) {
	srv, _, _ := newServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Config{Concurrency: 4, Duration: time.Minute, Request: post(srv.URL + "/ok")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if res.Elapsed > 10*time.Second || res.Errors != 0 {
		t.Fatalf("result %v (first error %v)", res, res.FirstError)
	}
}

func TestInvalidConfig(t *testing.T) {
	req := post("http://127.0.0.1:1/")
	for name, cfg := range map[string]Config{
		"no request":     {MaxRequests: 1},
		"no bound":       {Request: req},
		"negative conc":  {Request: req, MaxRequests: 1, Concurrency: -1},
		"negative bound": {Request: req, Duration: -time.Second},
	} {
		if _, err := Run(t.Context(), cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
}
