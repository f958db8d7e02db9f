package idemclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const payment = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{MaxAttempts: -1},
		{AttemptTimeout: -time.Second},
		{Policy: Policy{BaseDelay: -1}},
		{Policy: Policy{MaxRetryAfter: -1}},
		{KeyFormat: 2},
	} {
		_, err := New(nil, o)
		require.Error(t, err, "%+v", o)
	}
	tr, err := New(nil, Options{})
	require.NoError(t, err)
	o := tr.Options()
	require.Equal(t, defaultMaxAttempts, o.MaxAttempts)
	require.Equal(t, int64(defaultMaxBodyBytes), o.MaxBodyBytes)
	require.Equal(t, []string{http.MethodPost, http.MethodPatch}, o.Methods)
	require.Equal(t, http.DefaultTransport, tr.base)
	require.NotNil(t, tr.budget)
}

// Rule 1: one key per request, minted before the first attempt and sent
// on every attempt; the caller's request is left as it was.
func TestMintsOneKeyPerRequest(t *testing.T) {
	a := newApp()
	a.before = statusFor(2, http.StatusServiceUnavailable)
	s := newServer(t, a)
	tr, _ := newTransport(t, Options{})

	req := newRequest(t, http.MethodPost, s.URL, payment)
	req.Header.Set("Content-Type", "application/json")
	before := req.Header.Clone()
	r := mustCall(t, tr, req)
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, before, req.Header, "the caller's request is not modified")

	require.True(t, r.res.KeyMinted)
	require.Regexp(t, uuidV7, r.res.Key)
	require.Equal(t, 3, r.res.Attempts)
	require.Equal(t, [][]string{{r.res.Key}, {r.res.Key}, {r.res.Key}}, a.Headers(), "exactly one header, the same key, on every attempt")
	require.EqualValues(t, 1, a.executions.Load())

	// Another request, another key.
	r2 := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.NotEqual(t, r.res.Key, r2.res.Key)
	require.EqualValues(t, 2, a.executions.Load())
}

func TestMethodsThatGetAKey(t *testing.T) {
	a := newApp()
	s := newServer(t, a)
	for _, tc := range []struct {
		methods []string
		method  string
		keyed   bool
	}{
		{nil, http.MethodPost, true},
		{nil, http.MethodPatch, true},
		{nil, http.MethodPut, false},
		{nil, http.MethodDelete, false},
		{nil, http.MethodGet, false},
		{nil, http.MethodHead, false},
		{[]string{"post", "PUT", "DELETE"}, http.MethodPut, true},
		{[]string{"post", "PUT", "DELETE"}, http.MethodDelete, true},
		{[]string{"post", "PUT", "DELETE"}, http.MethodPost, true},
		{[]string{"post", "PUT", "DELETE"}, http.MethodPatch, false},
	} {
		t.Run(fmt.Sprintf("%v %s", tc.methods, tc.method), func(t *testing.T) {
			tr, _ := newTransport(t, Options{Methods: tc.methods})
			n := len(a.Headers())
			r := mustCall(t, tr, newRequest(t, tc.method, s.URL, ""))
			got := a.Headers()[n]
			if tc.keyed {
				require.Len(t, got, 1)
				require.Regexp(t, uuidV7, got[0])
				require.Equal(t, got[0], r.res.Key)
			} else {
				require.Empty(t, got)
				require.Empty(t, r.res.Key)
			}
		})
	}
}

// A key the caller set is sent exactly as set, on every attempt, whatever
// the format option says.
func TestCallerKeyIsNeverChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(h http.Header)
		want   string
		format KeyFormat
	}{
		{"token", func(h http.Header) { h.Set(HeaderKey, "order-42") }, "order-42", FormatString},
		{"sf-string", func(h http.Header) { h.Set(HeaderKey, `"order 42"`) }, `"order 42"`, FormatToken},
		{"odd", func(h http.Header) { h.Set(HeaderKey, "Order_42.v1~{x}") }, "Order_42.v1~{x}", FormatToken},
		{"lower-case name", func(h http.Header) { h["idempotency-key"] = []string{"order-43"} }, "order-43", FormatToken},
		{"on PUT", func(h http.Header) { h.Set(HeaderKey, "order-44") }, "order-44", FormatToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp()
			a.before = statusFor(2, http.StatusBadGateway)
			s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// Canonicalise the lower-case spelling for the app's bookkeeping.
				a.ServeHTTP(w, r)
			}))
			tr, _ := newTransport(t, Options{KeyFormat: tc.format})
			method := http.MethodPost
			if tc.name == "on PUT" {
				method = http.MethodPut
			}
			req := newRequest(t, method, s.URL, payment)
			tc.set(req.Header)
			before := req.Header.Clone()
			r := mustCall(t, tr, req)
			require.Equal(t, http.StatusCreated, r.status)
			require.Equal(t, before, req.Header)
			require.Equal(t, 3, r.res.Attempts)
			require.False(t, r.res.KeyMinted)
			require.Equal(t, tc.want, r.res.Key)
			for _, h := range a.Headers() {
				require.Equal(t, []string{tc.want}, h)
			}
			require.EqualValues(t, 1, a.executions.Load())
		})
	}
}

func TestPinnedKey(t *testing.T) {
	a := newApp()
	a.before = statusOnce(http.StatusServiceUnavailable)
	s := newServer(t, a)

	for _, tc := range []struct {
		key    string
		format KeyFormat
		want   string
	}{
		{"job-7", FormatToken, "job-7"},
		{"job-8", FormatString, `"job-8"`},
		{`job "9" \ x`, FormatString, `"job \"9\" \\ x"`},
	} {
		tr, _ := newTransport(t, Options{KeyFormat: tc.format})
		req := newRequest(t, http.MethodPost, s.URL, payment)
		req = req.WithContext(WithKey(req.Context(), tc.key))
		n := len(a.Headers())
		r := mustCall(t, tr, req)
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, tc.key, r.res.Key)
		require.False(t, r.res.KeyMinted)
		require.Equal(t, [][]string{{tc.want}, {tc.want}}, a.Headers()[n:])
	}

	// The same pinned key in a later "process": the stored answer.
	tr, _ := newTransport(t, Options{})
	req := newRequest(t, http.MethodPost, s.URL, payment)
	r := mustCall(t, tr, req.WithContext(WithKey(req.Context(), "job-7")))
	require.True(t, r.res.Replayed)
	require.Equal(t, 1, r.res.Attempts)
	require.EqualValues(t, 3, a.executions.Load())

	// A pinned key equal to the header is fine.
	req = newRequest(t, http.MethodPost, s.URL, payment)
	req.Header.Set(HeaderKey, "job-7")
	r = mustCall(t, tr, req.WithContext(WithKey(req.Context(), "job-7")))
	require.True(t, r.res.Replayed)
}

// A key that cannot be sent fails before anything is sent, and the body is
// closed.
func TestInvalidKeysAreRefused(t *testing.T) {
	a := newApp()
	s := newServer(t, a)
	tr, _ := newTransport(t, Options{})
	for _, tc := range []struct {
		name string
		req  func(*http.Request) *http.Request
	}{
		{"empty pinned", func(r *http.Request) *http.Request { return r.WithContext(WithKey(r.Context(), "")) }},
		{"long pinned", func(r *http.Request) *http.Request {
			return r.WithContext(WithKey(r.Context(), strings.Repeat("k", 256)))
		}},
		{"space in a token", func(r *http.Request) *http.Request { return r.WithContext(WithKey(r.Context(), "a b")) }},
		{"two headers", func(r *http.Request) *http.Request {
			r.Header.Add(HeaderKey, "k1")
			r.Header.Add(HeaderKey, "k2")
			return r
		}},
		{"two spellings", func(r *http.Request) *http.Request {
			r.Header.Set(HeaderKey, "k1")
			r.Header["idempotency-key"] = []string{"k1"}
			return r
		}},
		{"pin and header differ", func(r *http.Request) *http.Request {
			r.Header.Set(HeaderKey, "k1")
			return r.WithContext(WithKey(r.Context(), "k2"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &closeCounter{Reader: strings.NewReader(payment)}
			req, err := http.NewRequest(http.MethodPost, s.URL, body)
			require.NoError(t, err)
			var results []Result
			tr.o.OnResult = func(_ *http.Request, r Result) { results = append(results, r) }
			_, err = tr.RoundTrip(tc.req(req))
			require.ErrorIs(t, err, ErrInvalidKey)
			res, ok := ResultOf(nil, err)
			require.True(t, ok)
			require.Zero(t, res.Attempts)
			require.Equal(t, StopPermanent, res.Stop)
			require.Equal(t, []Result{res}, results)
			require.EqualValues(t, 1, body.closed.Load())
			require.Contains(t, err.Error(), "nothing sent")
		})
	}
	tr.o.OnResult = nil
	require.Empty(t, a.Headers(), "nothing reached the server")
}

type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error {
	c.closed.Add(1)
	return nil
}

func TestKeyFormatString(t *testing.T) {
	a := newApp()
	a.before = statusOnce(http.StatusTooManyRequests)
	s := newServer(t, a)
	tr, _ := newTransport(t, Options{KeyFormat: FormatString})
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	want := `"` + r.res.Key + `"`
	require.Regexp(t, uuidV7, r.res.Key)
	require.Equal(t, [][]string{{want}, {want}}, a.Headers())
	require.LessOrEqual(t, len(want), MaxKeyLen)
}

// Rule 3: which answers are retried.
func TestStatusSemantics(t *testing.T) {
	for _, tc := range []struct {
		status   int
		replayed bool
		keyless  bool // a GET without a key
		retried  bool
	}{
		{http.StatusConflict, false, false, true},
		{http.StatusTooManyRequests, false, false, true},
		{http.StatusBadGateway, false, false, true},
		{http.StatusServiceUnavailable, false, false, true},
		{http.StatusGatewayTimeout, false, false, true},
		{http.StatusInternalServerError, false, false, true},
		{http.StatusInternalServerError, true, false, false}, // a stored failure: futile
		{http.StatusServiceUnavailable, true, false, false},  // a replay of any status is final
		{http.StatusUnprocessableEntity, false, false, false},
		{http.StatusBadRequest, false, false, false},
		{http.StatusNotFound, false, false, false},
		{http.StatusRequestTimeout, false, false, false},
		{http.StatusTooEarly, false, false, false},
		{http.StatusPaymentRequired, false, false, false},
		{http.StatusNotImplemented, false, false, false},
		{http.StatusHTTPVersionNotSupported, false, false, false},
		{http.StatusOK, false, false, false},
		{http.StatusFound, false, false, false},
		{http.StatusConflict, false, true, false}, // without a key a 409 is the application's
		{http.StatusServiceUnavailable, false, true, true},
	} {
		name := fmt.Sprintf("%d replayed=%v keyless=%v", tc.status, tc.replayed, tc.keyless)
		t.Run(name, func(t *testing.T) {
			a := newApp()
			var h []string
			if tc.replayed {
				h = []string{HeaderReplayed, "true"}
			}
			a.before = statusOnce(tc.status, h...)
			s := newServer(t, a)
			tr, c := newTransport(t, Options{})
			method := http.MethodPost
			if tc.keyless {
				method = http.MethodGet
			}
			r := mustCall(t, tr, newRequest(t, method, s.URL, ""))
			if tc.retried {
				require.Equal(t, 2, r.res.Attempts)
				require.Equal(t, http.StatusCreated, r.status)
				require.Equal(t, StopFinal, r.res.Stop)
				require.Len(t, c.Slept(), 1)
			} else {
				require.Equal(t, 1, r.res.Attempts)
				require.Equal(t, tc.status, r.status)
				require.Equal(t, tc.replayed, r.res.Replayed)
				require.Equal(t, StopFinal, r.res.Stop)
				require.Empty(t, c.Slept())
				require.Contains(t, r.body, `"status":`, "the answer's body reaches the caller")
			}
		})
	}
}

// The connection drops after the server stored its outcome: the retry gets
// the stored answer, and the operation ran once.
func TestDroppedAnswerIsRetriedToTheReplay(t *testing.T) {
	for _, mode := range []dropMode{dropBefore, dropMid} {
		t.Run(map[dropMode]string{dropBefore: "before the answer", dropMid: "mid-response"}[mode], func(t *testing.T) {
			a := newApp()
			a.drop = func(n int) dropMode {
				if n == 1 {
					return mode
				}
				return keep
			}
			s := newServer(t, a)
			tr, _ := newTransport(t, Options{})
			r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
			require.Equal(t, http.StatusCreated, r.status)
			require.True(t, r.res.Replayed)
			require.Equal(t, 2, r.res.Attempts)
			require.Error(t, r.res.History[0].Err)
			if mode == dropMid {
				require.Equal(t, http.StatusCreated, r.res.History[0].Status, "the head arrived, the body did not")
			}
			require.EqualValues(t, 1, a.executions.Load(), "one execution")
			require.JSONEq(t, fmt.Sprintf(`{"id":"pay_1","body":%q}`, payment), r.body, "one final answer, whole")
		})
	}
}

// Rule 4: Retry-After, as seconds or an HTTP-date, clamped.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value func(now time.Time) string
		want  time.Duration
	}{
		{"seconds", func(time.Time) string { return "2" }, 2 * time.Second},
		{"HTTP-date", func(now time.Time) string { return now.Add(5 * time.Second).UTC().Format(http.TimeFormat) }, 5 * time.Second},
		{"clamped", func(time.Time) string { return "3600" }, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			c.now = c.now.Truncate(time.Second) // HTTP-dates have whole seconds
			a := newApp()
			a.before = func(w http.ResponseWriter, r *http.Request, n int) bool {
				if n > 2 {
					return false
				}
				return statusOnce(http.StatusConflict, "Retry-After", tc.value(c.Now()))(w, r, 1)
			}
			s := newServer(t, a)
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			tr, err := New(base, Options{Now: c.Now, Sleep: c.Sleep, Policy: Policy{MaxRetryAfter: 10 * time.Second}})
			require.NoError(t, err)
			r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
			require.Equal(t, http.StatusCreated, r.status)
			require.Equal(t, []time.Duration{tc.want, tc.want}, c.Slept())
			require.Equal(t, 3, r.res.Attempts)
			require.True(t, r.res.HasRetryAfter)
			want := tc.want
			if tc.name == "clamped" {
				want = time.Hour
			}
			require.Equal(t, want, r.res.RetryAfter, "as the server asked, before the clamp")
			require.Equal(t, 2*tc.want, r.res.Waited)
			require.Equal(t, []Attempt{
				{Status: http.StatusConflict, Wait: tc.want},
				{Status: http.StatusConflict, Wait: tc.want},
				{Status: http.StatusCreated},
			}, r.res.History)
			require.EqualValues(t, 1, a.executions.Load())
		})
	}
}

// Without Retry-After: exponential backoff with full jitter.
func TestBackoffBetweenAttempts(t *testing.T) {
	a := newApp()
	a.before = statusFor(4, http.StatusServiceUnavailable)
	s := newServer(t, a)
	tr, c := newTransport(t, Options{Policy: Policy{BaseDelay: 100 * time.Millisecond, Rand: func() float64 { return 0.5 }}})
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}, c.Slept())
	require.False(t, r.res.HasRetryAfter)
}

// Rule 4: never wait past the request context's deadline; return the
// answer in hand instead.
func TestNeverWaitsPastTheDeadline(t *testing.T) {
	a := newApp()
	a.before = statusFor(10, http.StatusServiceUnavailable, "Retry-After", "20")
	s := newServer(t, a)
	tr, c := newTransport(t, Options{})
	ctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(10*time.Second))
	defer cancel()
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment).WithContext(ctx))
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Equal(t, StopDeadline, r.res.Stop)
	require.Equal(t, 1, r.res.Attempts)
	require.Empty(t, c.Slept())
	require.Equal(t, 20*time.Second, r.res.RetryAfter)

	// A wait that ends before the deadline happens.
	a2 := newApp()
	a2.before = statusOnce(http.StatusServiceUnavailable, "Retry-After", "5")
	s2 := newServer(t, a2)
	r = mustCall(t, tr, newRequest(t, http.MethodPost, s2.URL, payment).WithContext(ctx))
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, []time.Duration{5 * time.Second}, c.Slept())
}

// A context cancelled while waiting ends the request with its error.
func TestCancelledWhileWaiting(t *testing.T) {
	a := newApp()
	a.before = statusFor(10, http.StatusServiceUnavailable)
	s := newServer(t, a)
	tr, c := newTransport(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.onSleep = func(time.Duration) { cancel() }
	_, err := tr.RoundTrip(newRequest(t, http.MethodPost, s.URL, payment).WithContext(ctx))
	require.ErrorIs(t, err, context.Canceled)
	res, ok := ResultOf(nil, err)
	require.True(t, ok)
	require.Equal(t, StopCanceled, res.Stop)
	require.Equal(t, 1, res.Attempts)
	require.Regexp(t, uuidV7, res.Key, "the key, to try again later with WithKey")
}

// Rule 2: a retried body is byte-identical, from GetBody or from the
// buffer; beyond the cap, a body without GetBody is not retried.
func TestBodies(t *testing.T) {
	t.Run("GetBody", func(t *testing.T) {
		a := newApp()
		a.before = statusFor(2, http.StatusServiceUnavailable)
		s := newServer(t, a)
		tr, _ := newTransport(t, Options{MaxBodyBytes: 8}) // GetBody needs no buffer
		req := newRequest(t, http.MethodPost, s.URL, payment)
		var calls atomic.Int32
		getBody := req.GetBody
		req.GetBody = func() (io.ReadCloser, error) { calls.Add(1); return getBody() }
		r := mustCall(t, tr, req)
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, []string{payment, payment, payment}, a.Bodies(r.res.Key))
		require.EqualValues(t, 2, calls.Load(), "once per retry")
	})
	t.Run("buffered", func(t *testing.T) {
		a := newApp()
		a.before = statusFor(2, http.StatusServiceUnavailable)
		s := newServer(t, a)
		tr, _ := newTransport(t, Options{MaxBodyBytes: int64(len(payment))})
		body := &closeCounter{Reader: strings.NewReader(payment)}
		req, err := http.NewRequest(http.MethodPost, s.URL, body)
		require.NoError(t, err)
		require.Nil(t, req.GetBody)
		r := mustCall(t, tr, req)
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, []string{payment, payment, payment}, a.Bodies(r.res.Key))
		require.EqualValues(t, 1, body.closed.Load())
	})
	t.Run("above the cap", func(t *testing.T) {
		a := newApp()
		a.before = statusFor(2, http.StatusServiceUnavailable)
		s := newServer(t, a)
		tr, c := newTransport(t, Options{MaxBodyBytes: int64(len(payment)) - 1})
		body := &closeCounter{Reader: strings.NewReader(payment)}
		req, err := http.NewRequest(http.MethodPost, s.URL, body)
		require.NoError(t, err)
		r := mustCall(t, tr, req)
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.Equal(t, 1, r.res.Attempts)
		require.Equal(t, StopBodyTooLarge, r.res.Stop)
		require.Regexp(t, uuidV7, r.res.Key, "still keyed: a later retry by the caller is safe")
		require.Equal(t, []string{payment}, a.Bodies(r.res.Key), "the whole body went out once")
		require.Empty(t, c.Slept())
		require.EqualValues(t, 1, body.closed.Load())
	})
	t.Run("never buffer", func(t *testing.T) {
		a := newApp()
		a.before = statusOnce(http.StatusServiceUnavailable)
		s := newServer(t, a)
		tr, _ := newTransport(t, Options{MaxBodyBytes: -1})
		req, err := http.NewRequest(http.MethodPost, s.URL, io.NopCloser(strings.NewReader(payment)))
		require.NoError(t, err)
		r := mustCall(t, tr, req)
		require.Equal(t, StopBodyTooLarge, r.res.Stop)
		require.Equal(t, http.StatusServiceUnavailable, r.status)
	})
	t.Run("unreadable", func(t *testing.T) {
		a := newApp()
		s := newServer(t, a)
		tr, _ := newTransport(t, Options{})
		req, err := http.NewRequest(http.MethodPost, s.URL, io.NopCloser(io.MultiReader(strings.NewReader("{"), iotestErr{})))
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, errBoom)
		require.Empty(t, a.Headers())
	})
}

var errBoom = errors.New("boom")

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errBoom }

// Rule 2: the previous answer's body is drained and closed before a retry,
// so the connection carries the next attempt.
func TestRetriesKeepTheConnection(t *testing.T) {
	a := newApp()
	a.before = statusFor(4, http.StatusServiceUnavailable) // bodies of ~2 KB each
	s := newServer(t, a)
	tr, _ := newTransport(t, Options{ResponseBuffer: -1}) // nothing read ahead: the drain must do it
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.Equal(t, 5, r.res.Attempts)
	require.Equal(t, http.StatusCreated, r.status)
	require.EqualValues(t, 1, s.conns.Load(), "five attempts on one connection")
}

// Network errors are retried; the last one is returned with the Result.
func TestConnectionRefusedIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	tr, c := newTransport(t, Options{MaxAttempts: 3})
	_, err = tr.RoundTrip(newRequest(t, http.MethodPost, "http://"+addr+"/v1/payments", payment))
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr)
	res, ok := ResultOf(nil, err)
	require.True(t, ok)
	require.Equal(t, 3, res.Attempts)
	require.Equal(t, StopAttempts, res.Stop)
	require.Len(t, c.Slept(), 2)
	require.Contains(t, err.Error(), res.Key)
}

// Rule 3: errors no retry can fix are not retried.
func TestPermanentErrorsAreNotRetried(t *testing.T) {
	t.Run("TLS verification", func(t *testing.T) {
		a := newApp()
		s := httptest.NewUnstartedServer(a)
		s.Config.ErrorLog = discardLog()
		s.StartTLS()
		t.Cleanup(s.Close)
		tr, c := newTransport(t, Options{}) // does not trust the test CA
		_, err := tr.RoundTrip(newRequest(t, http.MethodPost, s.URL, payment))
		require.Error(t, err)
		res, _ := ResultOf(nil, err)
		require.Equal(t, 1, res.Attempts)
		require.Equal(t, StopPermanent, res.Stop)
		require.Empty(t, c.Slept())
		require.Empty(t, a.Headers())
	})
	t.Run("HTTP answer to HTTPS", func(t *testing.T) {
		s := newServer(t, newApp())
		tr, c := newTransport(t, Options{})
		_, err := tr.RoundTrip(newRequest(t, http.MethodPost, strings.Replace(s.URL, "http:", "https:", 1), payment))
		require.Error(t, err)
		res, _ := ResultOf(nil, err)
		require.Equal(t, 1, res.Attempts)
		require.Equal(t, StopPermanent, res.Stop)
		require.Empty(t, c.Slept())
	})
	t.Run("bad scheme", func(t *testing.T) {
		tr, c := newTransport(t, Options{})
		_, err := tr.RoundTrip(newRequest(t, http.MethodPost, "ftp://127.0.0.1/x", payment))
		require.ErrorContains(t, err, "unsupported protocol scheme")
		res, _ := ResultOf(nil, err)
		require.Equal(t, 1, res.Attempts)
		require.Equal(t, StopPermanent, res.Stop)
		require.Empty(t, c.Slept())
	})
	t.Run("unknown host", func(t *testing.T) {
		var dials atomic.Int32
		base := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1) // what the resolver says for a name that does not exist
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "pay.example", IsNotFound: true}}
		}}
		c := newClock()
		tr, err := New(base, Options{Now: c.Now, Sleep: c.Sleep})
		require.NoError(t, err)
		_, err = tr.RoundTrip(newRequest(t, http.MethodPost, "http://pay.example/x", payment))
		require.Error(t, err)
		require.EqualValues(t, 1, dials.Load())
		res, _ := ResultOf(nil, err)
		require.Equal(t, 1, res.Attempts, "%v", err)
		require.Equal(t, StopPermanent, res.Stop)
		require.Empty(t, c.Slept())
	})
	t.Run("redirect loop", func(t *testing.T) {
		var hits atomic.Int32
		s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			http.Redirect(w, r, "/again", http.StatusTemporaryRedirect)
		}))
		var results []Result
		var mu sync.Mutex
		tr, c := newTransport(t, Options{OnResult: func(_ *http.Request, r Result) {
			mu.Lock()
			defer mu.Unlock()
			results = append(results, r)
		}})
		client := &http.Client{Transport: tr}
		resp, err := client.Post(s.URL, "application/json", strings.NewReader(payment))
		if resp != nil {
			_ = resp.Body.Close()
		}
		require.ErrorContains(t, err, "stopped after 10 redirects")
		require.EqualValues(t, 10, hits.Load(), "one request per hop")
		require.Len(t, results, 10)
		for _, r := range results {
			require.Equal(t, 1, r.Attempts)
			require.Equal(t, StopFinal, r.Stop)
		}
		require.Empty(t, c.Slept())
	})
}

// A request without a key whose method is not idempotent is sent once.
func TestUnsafeRequestsAreSentOnce(t *testing.T) {
	a := newApp()
	a.before = statusOnce(http.StatusServiceUnavailable)
	s := newServer(t, a)
	tr, c := newTransport(t, Options{Methods: []string{}})
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Equal(t, StopUnsafe, r.res.Stop)
	require.Empty(t, r.res.Key)
	require.Empty(t, c.Slept())
}

// An attempt that hangs is abandoned after AttemptTimeout and retried with
// the same key: the server still running it answers 409, then the stored
// outcome. One execution.
func TestAttemptTimeout(t *testing.T) {
	release := make(chan struct{})
	stored := make(chan struct{})
	var once sync.Once
	a := newApp()
	var running atomic.Bool
	a.before = func(w http.ResponseWriter, r *http.Request, n int) bool {
		switch {
		case n == 1:
			running.Store(true)
			go func() { // the handler outlives its client, as idemkey's does
				<-release
				a.mu.Lock()
				a.stored[r.Header.Get(HeaderKey)] = answer{status: http.StatusCreated, body: `{"id":"pay_slow"}`}
				a.mu.Unlock()
				a.executions.Add(1)
				running.Store(false)
				close(stored)
			}()
			<-r.Context().Done() // the client gave up
			return true
		case running.Load():
			return statusOnce(http.StatusConflict, "Retry-After", "1")(w, r, 1)
		}
		return false
	}
	s := newServer(t, a)
	// Long enough for a 409 on a loaded machine; the first attempt uses all of it.
	tr, c := newTransport(t, Options{AttemptTimeout: time.Second})
	c.onSleep = func(time.Duration) {
		if len(c.Slept()) == 2 { // after the 409: let the first attempt finish
			once.Do(func() { close(release) })
			<-stored
		}
	}
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.Equal(t, http.StatusCreated, r.status)
	require.True(t, r.res.Replayed)
	require.Equal(t, `{"id":"pay_slow"}`, r.body)
	require.Equal(t, 3, r.res.Attempts)
	require.ErrorIs(t, r.res.History[0].Err, context.DeadlineExceeded)
	require.Equal(t, http.StatusConflict, r.res.History[1].Status)
	require.Equal(t, time.Second, r.res.History[1].Wait)
	require.EqualValues(t, 1, a.executions.Load())
}

// Rule 4: the retry budget stops retries when most requests fail, and
// recovers.
func TestRetryBudget(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	a := newApp()
	a.before = func(w http.ResponseWriter, r *http.Request, n int) bool {
		if !failing.Load() {
			return false
		}
		return statusOnce(http.StatusServiceUnavailable)(w, r, 1)
	}
	s := newServer(t, a)
	budget, err := NewBudget(BudgetOptions{Burst: 10, Ratio: 0.2, PerSecond: 1})
	require.NoError(t, err)
	// Short waits: the fake clock moves by what the Transport sleeps, and
	// time refills the bucket too.
	tr, c := newTransport(t, Options{Budget: budget, MaxAttempts: 4, Policy: Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	host := strings.TrimPrefix(s.URL, "http://")

	send := func() Result {
		return mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment)).res
	}
	// The clock stands still while the server fails every request: the
	// burst goes first, then one retry per five requests.
	retries, budgeted := 0, 0
	const n = 100
	for range n {
		r := send()
		retries += r.Retries()
		if r.Stop == StopBudget {
			budgeted++
		}
	}
	require.LessOrEqual(t, retries, 10+n/5+1, "burst plus a fifth of the requests (plus the time slept, under 0.1s)")
	require.GreaterOrEqual(t, retries, n/5)
	require.Greater(t, budgeted, n/2, "most requests were denied a retry")
	require.Less(t, budget.Tokens(host, c.Now()), 1.0)
	require.Len(t, c.Slept(), retries)

	// Time refills the bucket: a failing request gets its retries again.
	c.Advance(10 * time.Second)
	r := send()
	require.Equal(t, 4, r.Attempts)
	require.Equal(t, StopAttempts, r.Stop)

	// The server recovers: successes need no retries and fill the bucket.
	failing.Store(false)
	for range 50 {
		require.Equal(t, 1, send().Attempts)
	}
	require.InDelta(t, 10, budget.Tokens(host, c.Now()), 0.01)

	// Each host has its own bucket.
	require.Equal(t, 10.0, budget.Tokens("elsewhere:80", c.Now()))

	// Off: only MaxAttempts bounds retries.
	failing.Store(true)
	tr2, _ := newTransport(t, Options{NoBudget: true, MaxAttempts: 4})
	for range 30 {
		require.Equal(t, 3, mustCall(t, tr2, newRequest(t, http.MethodPost, s.URL, payment)).res.Retries())
	}
}

// One logical operation ends with exactly one execution and one final
// answer, however the network and the server misbehave.
func TestExactlyOnceUnderChaos(t *testing.T) {
	a := newApp()
	rng := rand.New(rand.NewPCG(15, 15))
	var mu sync.Mutex
	roll := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
	a.before = func(w http.ResponseWriter, r *http.Request, n int) bool {
		switch x := roll(); {
		case x < 0.1:
			return statusOnce(http.StatusServiceUnavailable, "Retry-After", "1")(w, r, 1)
		case x < 0.15:
			return statusOnce(http.StatusBadGateway)(w, r, 1)
		case x < 0.2:
			panic(http.ErrAbortHandler) // lost before the handler
		}
		return false
	}
	a.drop = func(int) dropMode {
		switch x := roll(); {
		case x < 0.15:
			return dropBefore
		case x < 0.25:
			return dropMid
		}
		return keep
	}
	s := newServer(t, a)
	var retries atomic.Int64
	tr, _ := newTransport(t, Options{NoBudget: true, MaxAttempts: 20, OnResult: func(_ *http.Request, r Result) {
		retries.Add(int64(r.Retries()))
	}})

	const n = 200
	type outcome struct {
		key, body string
		status    int
		err       error
	}
	out := make(chan outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"amount": %d}`, 100+i)
			r, err := call(t, tr, newRequest(t, http.MethodPost, s.URL, body))
			if err != nil {
				out <- outcome{err: err}
				return
			}
			out <- outcome{key: r.res.Key, body: r.body, status: r.status}
		})
	}
	wg.Wait()
	close(out)
	keys := map[string]bool{}
	for o := range out {
		require.NoError(t, o.err)
		require.Equal(t, http.StatusCreated, o.status)
		require.False(t, keys[o.key])
		keys[o.key] = true
		a.mu.Lock()
		st := a.stored[o.key]
		a.mu.Unlock()
		require.Equal(t, st.body, o.body, "the final answer is the one execution's")
	}
	require.Len(t, keys, n)
	require.EqualValues(t, n, a.executions.Load(), "one execution per operation")
	require.Positive(t, retries.Load())
	t.Logf("%d operations, %d executions, %d retries by the transport, %d requests at the server", n, a.executions.Load(), retries.Load(), len(a.Headers()))
}

// ResultOf works through http.Client, whose Timeout wraps the body and
// whose errors wrap the Transport's.
func TestResultOfThroughClient(t *testing.T) {
	a := newApp()
	a.before = statusOnce(http.StatusServiceUnavailable, "Retry-After", "0")
	s := newServer(t, a)
	var got []Result
	tr, _ := newTransport(t, Options{OnResult: func(_ *http.Request, r Result) { got = append(got, r) }})
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	resp, err := client.Post(s.URL, "application/json", strings.NewReader(payment))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Contains(t, string(b), "pay_1")
	r, ok := ResultOf(resp, err)
	require.True(t, ok)
	require.Equal(t, 2, r.Attempts)
	require.True(t, r.HasRetryAfter)
	require.Zero(t, r.RetryAfter)
	require.Equal(t, []Result{r}, got)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	_, err = client.Post("http://"+ln.Addr().String(), "application/json", strings.NewReader(payment))
	var uerr *url.Error
	require.ErrorAs(t, err, &uerr)
	r, ok = ResultOf(nil, err)
	require.True(t, ok)
	require.Equal(t, defaultMaxAttempts, r.Attempts)

	_, ok = ResultOf(&http.Response{Request: httptest.NewRequest(http.MethodGet, "/", nil)}, nil)
	require.False(t, ok)
	_, ok = ResultOf(nil, errBoom)
	require.False(t, ok)
}

// A response larger than ResponseBuffer streams on; one within it is
// read ahead whole.
func TestLargeResponsesStream(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 64<<10)
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(big)
	}))
	tr, _ := newTransport(t, Options{ResponseBuffer: 1024})
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.Equal(t, len(big), len(r.body))
	tr, _ = newTransport(t, Options{AttemptTimeout: time.Minute})
	r = mustCall(t, tr, newRequest(t, http.MethodGet, s.URL, ""))
	require.Equal(t, len(big), len(r.body))
}

func TestCloseIdleConnections(t *testing.T) {
	s := newServer(t, newApp())
	tr, _ := newTransport(t, Options{})
	mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	tr.CloseIdleConnections()
	mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.EqualValues(t, 2, s.conns.Load())
}
