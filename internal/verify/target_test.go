package verify

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/refserver"
)

func newRequest(t *testing.T, ctx context.Context, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/pay?x=1", strings.NewReader(body))
	require.NoError(t, err)
	return req
}

// The handler target serves a request as net/http's server would.
func TestHandlerTargetServes(t *testing.T) {
	var got *http.Request
	var gotBody string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Location", "/pay/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "made")
	})
	n := int64(0)
	tgt := NewHandlerTarget(h, func() int64 { n++; return n })
	resp, err := tgt.Send(newRequest(t, t.Context(), "body"), false)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "made", string(b))
	require.Equal(t, "/pay/1", resp.Header.Get("Location"))
	require.Equal(t, "body", gotBody)
	require.Equal(t, "example.com", got.Host)
	require.Equal(t, "/pay?x=1", got.RequestURI)
	require.NotEmpty(t, got.RemoteAddr)

	c, ok, err := tgt.Count(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1), c)
	_, ok, _ = NewHandlerTarget(h, nil).Count(t.Context())
	require.False(t, ok)

	// Lost: the handler ran, the answer is gone.
	gotBody = ""
	_, err = tgt.Send(newRequest(t, t.Context(), "again"), true)
	require.ErrorIs(t, err, errDropped)
	require.Equal(t, "again", gotBody)
}

// A panic is no answer, as a closed connection; a handler that never
// returns is given up at the request's deadline.
func TestHandlerTargetNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"panic", func(http.ResponseWriter, *http.Request) { panic("boom") }, "the handler panicked: boom"},
		{"abort", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }, "the handler aborted (http.ErrAbortHandler)"},
		// No recover() stops runtime.Goexit: the way to crash under a
		// recovery middleware (gin.Recovery answers an aborted handler).
		{"exit", func(http.ResponseWriter, *http.Request) { runtime.Goexit() }, "the handler exited (runtime.Goexit)"},
		{"stuck", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done(); time.Sleep(10 * time.Millisecond) }, "the handler did not answer: context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			_, err := NewHandlerTarget(tc.h, nil).Send(newRequest(t, ctx, ""), false)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// The same checks in process: the reference server passes, and the kit's
// checks find its shared scope.
func TestRunOnAHandler(t *testing.T) {
	for _, tc := range []struct {
		server *refserver.Server
		want   map[string]string
	}{
		{&refserver.Server{}, map[string]string{CheckScope: ResultOK}},
		{&refserver.Server{SharedScope: true}, map[string]string{CheckScope: ResultFail}},
		{&refserver.Server{IgnoreBody: true}, map[string]string{CheckMismatch: ResultFail, CheckScope: ResultOK}},
	} {
		s := tc.server
		rep, err := Run(t.Context(), NewHandlerTarget(s, s.Runs), Config{
			URL: &url.URL{Path: "/pay"}, Body: []byte(`{"amount":1}`), CountName: "runs", Lose: "dropped",
			Header:      http.Header{"Authorization": {"alice"}},
			OtherHeader: http.Header{"Authorization": {"bob"}},
			Kit:         true, Words: Words{OtherHeader: "OtherHeader", Crash: "Crash", Records: "Redis"},
		})
		require.NoError(t, err)
		got := map[string]string{}
		for _, c := range rep.Checks {
			got[c.Name] = c.Result
		}
		want := map[string]string{CheckMissingKey: ResultOK, CheckMalformedKey: ResultOK, CheckConcurrency: ResultOK,
			CheckReplay: ResultOK, CheckMismatch: ResultOK, CheckSideEffects: ResultOK, CheckLostResponse: ResultOK,
			CheckSameCaller: ResultSkip, CheckCrashResume: ResultSkip, CheckTTL: ResultSkip}
		for k, v := range tc.want {
			want[k] = v
		}
		require.Equal(t, want, got)
		require.Equal(t, "POST /pay", rep.endpoint())
	}
}

// The ttl check: every key has a TTL, and there are keys.
func TestTTLCheck(t *testing.T) {
	for _, tc := range []struct {
		recs    []Record
		err     error
		result  string
		summary string
	}{
		{[]Record{{"idem:a", time.Hour}, {"idem:b", 2 * time.Hour}}, nil, ResultOK, `2 keys under "idem:": TTL 1h0m0s to 2h0m0s`},
		{[]Record{{"idem:a", time.Hour}, {"idem:b", -1}}, nil, ResultFail, `2 keys under "idem:": TTL 1h0m0s, 1 without one`},
		{nil, nil, ResultFail, `no key under "idem:"`},
		{nil, io.ErrUnexpectedEOF, ResultFail, "the records could not be read"},
	} {
		s := &Session{cfg: Config{RecordsWhere: `under "idem:"`, Records: func(context.Context) ([]Record, error) { return tc.recs, tc.err }}, rep: &Report{}}
		c, err := s.ttl(t.Context())
		require.NoError(t, err)
		require.Equal(t, tc.result, c.Result, c.Failed())
		require.Equal(t, tc.summary, c.Summary)
	}
}

// keyLog is a target that notes the key of every request it sends.
type keyLog struct {
	Target
	mu   sync.Mutex
	keys []string
}

func (k *keyLog) Send(req *http.Request, lose bool) (*http.Response, error) {
	k.mu.Lock()
	k.keys = append(k.keys, req.Header.Get("Idempotency-Key"))
	k.mu.Unlock()
	return k.Target.Send(req, lose)
}

func (k *keyLog) since(n int) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.keys[n:])
}

// The fingerprint probes draw on no other check's requests: they send a
// key of their own, first as it is, and compare with that key's first
// answer; no other step sends their key.
func TestFingerprintProbesUseAKeyOfTheirOwn(t *testing.T) {
	srv := &refserver.Server{}
	tgt := &keyLog{Target: NewHandlerTarget(srv, srv.Runs)}
	s, err := Start(t.Context(), tgt, Config{URL: &url.URL{Path: "/pay"}, Body: []byte(`{"amount":1}`), CountName: "runs",
		Header: http.Header{"Authorization": {"alice"}}, Lose: "dropped"})
	require.NoError(t, err)
	byStep := map[string][]string{}
	for _, st := range s.Steps() {
		n := len(tgt.since(0))
		_, err := st.Run(t.Context())
		require.NoError(t, err)
		byStep[st.Name] = tgt.since(n)
	}
	rep, err := s.Finish(t.Context())
	require.NoError(t, err)

	probes := byStep[StepFingerprint]
	require.Len(t, probes, 4, "its own first request, then a changed body, a query, a re-indented body")
	require.Len(t, slices.Compact(slices.Clone(probes)), 1, "one key: %q", probes)
	for step, keys := range byStep {
		if step != StepFingerprint {
			require.NotContains(t, keys, probes[0], "%s sent the probes' key", step)
		}
	}
	fp := rep.Observed.Fingerprint
	require.Equal(t, "covered: a changed body ($.amount: 1 -> 2) got 422 (text/plain; charset=utf-8, 37 bytes; counter +0)", fp.Body)
	require.True(t, strings.HasPrefix(fp.Query, "covered: "), fp.Query)
	require.True(t, strings.HasPrefix(fp.Canonical, "no, the body's bytes are hashed: "), fp.Canonical)
	require.Equal(t, int64(3), srv.Runs(), "the concurrency check's run, the lost response's and the probes' own")
}
