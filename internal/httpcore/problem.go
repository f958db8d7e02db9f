package httpcore

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// problem is an RFC 9457 problem detail the middleware answers with.
type problem struct {
	status     int
	slug       string // appended to Options.ProblemBase to make the type URI
	title      string
	detail     string
	retryAfter time.Duration // sent as Retry-After when set
}

// The problem bodies, one stable type per case. docs/problems.md documents each slug.
var (
	problemKeyMissing = problem{status: http.StatusBadRequest, slug: "key-missing", title: "Idempotency key missing"}
	problemInProgress = problem{status: http.StatusConflict, slug: "request-in-progress", title: "Request in progress",
		detail: "A request with this idempotency key is still being processed. Retry with the same key after Retry-After seconds to get its response."}
	problemKeyReused = problem{status: http.StatusUnprocessableEntity, slug: "key-reused", title: "Idempotency key reused",
		detail: "This idempotency key was already used for a different request (another method, path, query or body). Use a new key for a new request; retries must send exactly the same request."}
	problemUnavailable = problem{status: http.StatusServiceUnavailable, slug: "store-unavailable", title: "Idempotency store unavailable",
		detail: "The request was not processed because its idempotency key could not be checked. Retry with the same key after Retry-After seconds."}
	problemBodyTooLarge = problem{status: http.StatusRequestEntityTooLarge, slug: "body-too-large", title: "Request body too large"}
	problemBodyTimeout  = problem{status: http.StatusRequestTimeout, slug: "body-timeout", title: "Request body too slow",
		detail: "The request body did not arrive in time. Nothing was processed or stored; retry with the same key."}
	problemBodyUnreadable = problem{status: http.StatusBadRequest, slug: "body-unreadable", title: "Request body unreadable",
		detail: "The request body could not be read in full (truncated or aborted). Nothing was processed or stored; retry with the same key."}
	problemScope = problem{status: http.StatusUnauthorized, slug: "caller-unknown", title: "Caller not identified",
		detail: "The caller could not be identified, and idempotency keys belong to a caller. Authenticate and retry with the same key."}
	problemScopeRequired = problem{status: http.StatusInternalServerError, slug: "scope-required", title: "Caller scope not configured",
		detail: "The service cannot tell which caller this request comes from, so it cannot keep callers' idempotency keys apart. Nothing was processed or stored; the service must be configured to identify callers."}
	problemScopeInvalid = problem{status: http.StatusInternalServerError, slug: "scope-invalid", title: "Caller scope invalid",
		detail: "The service derived an invalid scope for this caller. Nothing was processed or stored."}
	problemStoreError = problem{status: http.StatusInternalServerError, slug: "store-error", title: "Idempotency store error",
		detail: "The idempotency store gave an answer this service cannot use. Nothing was processed; contact the service."}
	problemStoredUnreadable = problem{status: http.StatusInternalServerError, slug: "stored-response-unreadable", title: "Stored response unreadable",
		detail: "The stored outcome of this request cannot be read. The request ran once; contact the service."}
)

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// body returns p as JSON.
func (p *problem) body(base string) []byte {
	b, _ := json.Marshal(problemBody{Type: base + p.slug, Title: p.title, Status: p.status, Detail: p.detail})
	return b
}

// write sends p as application/problem+json.
func (p *problem) write(w http.ResponseWriter, base string) {
	b := p.body(base)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.retryAfter > 0 {
		h.Set("Retry-After", retryAfterSeconds(p.retryAfter))
	}
	w.WriteHeader(p.status)
	_, _ = w.Write(b)
}

// with returns a copy of p with another detail.
func (p problem) with(detail string) *problem {
	p.detail = detail
	return &p
}

// retryAfterSeconds renders d as whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return strconv.FormatInt(max(int64(s), 1), 10)
}
