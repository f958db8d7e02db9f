package idemclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// drainLimit bounds how much of a response body the Transport reads to keep
// its connection before a retry.
const drainLimit = 64 << 10

// Transport is an http.RoundTripper that makes retries safe by
// construction: it sends one idempotency key per request on every attempt,
// with the same body, and retries only what the server's answer says is
// worth retrying. See the package documentation for the rules. A Transport
// is safe for concurrent use; it does not modify the request it is given.
type Transport struct {
	base    http.RoundTripper
	o       Options
	methods map[string]bool
	budget  *Budget
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that sends through base (http.DefaultTransport if
// nil), configured by opts. It returns an error for negative limits or an
// unknown KeyFormat.
func New(base http.RoundTripper, opts Options) (*Transport, error) {
	switch {
	case opts.MaxAttempts < 0:
		return nil, errors.New("idemclient: Options.MaxAttempts must not be negative")
	case opts.AttemptTimeout < 0:
		return nil, errors.New("idemclient: Options.AttemptTimeout must not be negative")
	case opts.Policy.BaseDelay < 0 || opts.Policy.MaxDelay < 0 || opts.Policy.MaxRetryAfter < 0:
		return nil, errors.New("idemclient: Options.Policy delays must not be negative")
	case opts.KeyFormat != FormatToken && opts.KeyFormat != FormatString:
		return nil, fmt.Errorf("idemclient: unknown Options.KeyFormat %d", int(opts.KeyFormat))
	case opts.RetryPolicy != nil && (opts.Policy.BaseDelay != 0 || opts.Policy.MaxDelay != 0 || opts.Policy.MaxRetryAfter != 0 || opts.Policy.Rand != nil):
		return nil, errors.New("idemclient: set Options.RetryPolicy or Options.Policy, not both (a RetryPolicy's waits are its RetryOptions.Policy)")
	case opts.RetryPolicy != nil && opts.Budget != nil:
		return nil, errors.New("idemclient: set Options.RetryPolicy or Options.Budget, not both (a RetryPolicy keeps its own budget)")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = defaultMaxAttempts
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = defaultMaxBodyBytes
	}
	if opts.ResponseBuffer == 0 {
		opts.ResponseBuffer = defaultResponseBuffer
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	if opts.Methods == nil {
		opts.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	methods := make(map[string]bool, len(opts.Methods))
	for _, m := range opts.Methods {
		methods[strings.ToUpper(m)] = true
	}
	opts.Methods = slices.Clone(opts.Methods)
	t := &Transport{base: base, o: opts, methods: methods, budget: opts.Budget}
	if t.budget == nil && !opts.NoBudget && opts.RetryPolicy == nil {
		t.budget, _ = NewBudget(BudgetOptions{})
	}
	return t, nil
}

// Options returns the options in effect, defaults applied.
func (t *Transport) Options() Options { return t.o }

// CloseIdleConnections closes the idle connections of the underlying
// transport, if it has such a method; http.Client.CloseIdleConnections
// calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, retrying it as the package documentation describes,
// and returns the final response or, if none, an *Error. The response's
// Request carries the Result for ResultOf. Like every RoundTripper it
// closes req.Body, also on error, and does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	res := &Result{}
	key, minted, err := t.key(req)
	if err != nil {
		closeBody(req)
		return t.fail(req, res, StopPermanent, err)
	}
	res.Key, res.KeyMinted = key.value, minted
	host := ""
	if req.URL != nil {
		host = req.URL.Host
	}
	rp := t.o.RetryPolicy
	if rp != nil {
		if stop := rp.Allow(host, 1, t.o.Now()); stop != "" {
			closeBody(req)
			return t.fail(req, res, stop, ErrThrottled)
		}
	}

	// Whether a retry is safe, and if not, why.
	var noRetry Stop
	switch {
	case key.value == "" && !idempotent(req.Method):
		noRetry = StopUnsafe
	case req.URL == nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https"):
		noRetry = StopPermanent // the base transport refuses it, or knows a scheme we cannot judge
	case t.o.MaxAttempts == 1:
		noRetry = StopAttempts
	}
	body, err := t.body(req, noRetry == "")
	if err != nil {
		return t.fail(req, res, StopPermanent, err)
	}
	if noRetry == "" && body.again == nil {
		noRetry = StopBodyTooLarge
	}
	if noRetry == "" && t.budget != nil {
		t.budget.deposit(host, t.o.Now())
	}

	for n := 1; ; n++ {
		out, cancel, err := t.attempt(req, key, body, n)
		if err != nil { // GetBody failed
			return t.fail(req, res, StopPermanent, err)
		}
		resp, err := t.base.RoundTrip(out)
		if err == nil && noRetry == "" {
			err = readAhead(resp, t.o.ResponseBuffer, cancel)
		} else if err == nil {
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
		}
		if err != nil {
			cancel()
		}

		a := Attempt{Err: err}
		if resp != nil {
			a.Status, a.Replayed = resp.StatusCode, isReplay(resp)
		}
		res.History = append(res.History, a)
		res.Attempts = n
		retryAfter := ""
		if resp != nil {
			retryAfter = resp.Header.Get("Retry-After")
			if d, ok := ParseRetryAfter(retryAfter, t.o.Now()); ok {
				res.RetryAfter, res.HasRetryAfter = d, true
			}
		}
		if err != nil {
			resp = nil // its body was closed by readAhead
		}
		if rp != nil {
			rp.Done(host, err == nil && !t.o.Policy.Retryable(a, key.value != ""), t.o.Now())
		}

		// Decide whether to try again.
		var stop Stop
		switch {
		case err != nil && ctx.Err() != nil:
			stop = StopCanceled
		case !t.o.Policy.Retryable(a, key.value != ""):
			stop = StopFinal
			if err != nil {
				stop = StopPermanent
			}
		case noRetry != "":
			stop = noRetry
		case n >= t.o.MaxAttempts:
			stop = StopAttempts
		case ctx.Err() != nil:
			stop = StopCanceled // with the answer in hand
		}
		var wait time.Duration
		if stop == "" {
			now := t.o.Now()
			if rp != nil {
				wait = rp.Delay(n, retryAfter, now)
			} else {
				wait = t.o.Policy.Delay(n, retryAfter, now)
			}
			switch dl, ok := ctx.Deadline(); {
			case ok && !now.Add(wait).Before(dl):
				stop = StopDeadline
			case rp != nil:
				stop = rp.Allow(host, n+1, now)
			case t.budget != nil && !t.budget.withdraw(host, now):
				stop = StopBudget
			}
		}
		if stop != "" {
			res.Stop = stop
			if resp != nil {
				res.Replayed = a.Replayed
				return t.answer(req, res, resp), nil
			}
			return t.fail(req, res, stop, err)
		}

		drain(resp)
		res.History[n-1].Wait = wait
		res.Waited += wait
		if err := t.o.Sleep(ctx, wait); err != nil {
			return t.fail(req, res, StopCanceled, err)
		}
	}
}

// key is the key a request is sent with.
type key struct {
	value  string // the key, "" for none
	header string // what to set the header to; "" to leave the caller's
}

// key finds or makes the request's key.
func (t *Transport) key(req *http.Request) (k key, minted bool, err error) {
	have := callerKeys(req.Header)
	pinned, isPinned := keyFrom(req.Context())
	switch {
	case len(have) > 1:
		return key{}, false, fmt.Errorf("%w: the request has %d %s headers; send exactly one", ErrInvalidKey, len(have), HeaderKey)
	case len(have) == 1 && isPinned && have[0] != pinned && have[0] != encodeKey(pinned, t.o.KeyFormat):
		return key{}, false, fmt.Errorf("%w: the context pins key %q but the %s header says %q", ErrInvalidKey, pinned, HeaderKey, have[0])
	case len(have) == 1:
		return key{value: have[0]}, false, nil
	case !t.methods[req.Method]:
		return key{}, false, nil
	case isPinned:
		if err := checkKey(pinned, t.o.KeyFormat); err != nil {
			return key{}, false, err
		}
		return key{value: pinned, header: encodeKey(pinned, t.o.KeyFormat)}, false, nil
	}
	v := NewKey()
	return key{value: v, header: encodeKey(v, t.o.KeyFormat)}, true, nil
}

// body is where each attempt's request body comes from.
type body struct {
	first io.ReadCloser                 // the first attempt's
	again func() (io.ReadCloser, error) // later attempts'; nil if the body cannot be sent again
}

// body prepares req's body for one attempt or, if retry, for several.
func (t *Transport) body(req *http.Request, retry bool) (body, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return body{first: req.Body, again: func() (io.ReadCloser, error) { return req.Body, nil }}, nil
	case req.GetBody != nil:
		return body{first: req.Body, again: req.GetBody}, nil
	case !retry || t.o.MaxBodyBytes < 0:
		return body{first: req.Body}, nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, t.o.MaxBodyBytes+1))
	if err != nil {
		_ = req.Body.Close()
		return body{}, fmt.Errorf("idemclient: reading the request body: %w", err)
	}
	if int64(len(buf)) > t.o.MaxBodyBytes {
		// Too large to keep: send what was read and the rest, once.
		return body{first: struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}}, nil
	}
	_ = req.Body.Close()
	again := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	first, _ := again()
	return body{first: first, again: again}, nil
}

// attempt builds the request for attempt n. cancel ends its context (the
// AttemptTimeout one, if any).
func (t *Transport) attempt(req *http.Request, k key, b body, n int) (*http.Request, context.CancelFunc, error) {
	rc := b.first
	if n > 1 {
		var err error
		if rc, err = b.again(); err != nil {
			return nil, nil, fmt.Errorf("idemclient: GetBody: %w", err)
		}
	}
	ctx, cancel := req.Context(), context.CancelFunc(func() {})
	if t.o.AttemptTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, t.o.AttemptTimeout)
	}
	out := req.Clone(ctx)
	if k.header != "" {
		if out.Header == nil {
			out.Header = make(http.Header)
		}
		out.Header.Set(HeaderKey, k.header)
	}
	out.Body = rc
	if b.again != nil {
		// The base transport replays a request on a stale keep-alive
		// connection only if it can rewind the body.
		out.GetBody = b.again
	}
	return out, cancel, nil
}

// answer returns resp as the final answer, with res attached.
func (t *Transport) answer(req *http.Request, res *Result, resp *http.Response) *http.Response {
	if t.o.OnResult != nil {
		t.o.OnResult(req, *res)
	}
	sent := resp.Request
	if sent == nil {
		sent = req
	}
	resp.Request = withResult(sent, res)
	return resp
}

// fail ends the request without a response.
func (t *Transport) fail(req *http.Request, res *Result, stop Stop, err error) (*http.Response, error) {
	res.Stop = stop
	if t.o.OnResult != nil {
		t.o.OnResult(req, *res)
	}
	return nil, &Error{Result: *res, Err: err}
}

// idempotent reports whether HTTP defines method as idempotent (RFC 9110
// section 9.2.2).
func idempotent(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

func isReplay(resp *http.Response) bool {
	return strings.EqualFold(strings.TrimSpace(resp.Header.Get(HeaderReplayed)), "true")
}

// readAhead reads up to limit bytes of resp's body, so that a connection
// lost in the middle of the response fails the attempt. A body that ends
// within limit is closed and replaced by its bytes, and the attempt's
// context is cancelled; a longer one streams on and cancels it when closed.
// On error the body is closed.
func readAhead(resp *http.Response, limit int64, cancel context.CancelFunc) error {
	if limit < 0 || resp.Body == nil || resp.Body == http.NoBody {
		resp.Body = &cancelBody{ReadCloser: bodyOrEmpty(resp.Body), cancel: cancel}
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		_ = resp.Body.Close()
		return fmt.Errorf("reading the %d response: %w", resp.StatusCode, err)
	}
	if int64(len(buf)) <= limit {
		_ = resp.Body.Close()
		cancel()
		resp.Body = io.NopCloser(bytes.NewReader(buf))
		return nil
	}
	resp.Body = &cancelBody{ReadCloser: struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}, cancel: cancel}
	return nil
}

func bodyOrEmpty(rc io.ReadCloser) io.ReadCloser {
	if rc == nil {
		return http.NoBody
	}
	return rc
}

// cancelBody cancels an attempt's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// drain reads what is left of a response body, within drainLimit, and
// closes it, so that its connection can carry the next attempt.
func drain(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// sleep is the default Options.Sleep.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
