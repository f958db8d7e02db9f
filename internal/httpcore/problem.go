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
	// section is the section of the IETF Idempotency-Key draft the problem
	// answers ("section-2.1"), sent as the spec member; "" for none.
	section string
}

// DraftURL is the IETF httpapi Idempotency-Key draft the key problems cite:
// their spec member is it with the section's anchor. The version is pinned
// so that a section number always means what it meant when written.
const DraftURL = "https://www.ietf.org/archive/id/draft-ietf-httpapi-idempotency-key-header-07.html"

// The problem types, one stable slug per case: this is their one catalogue,
// and docs/problems.md documents each (a test holds the two together). A
// problem whose status or detail depends on the request is a template here,
// completed with the detail format beside it.
var (
	problemKeyMissing   = problem{status: http.StatusBadRequest, slug: "key-missing", title: "Idempotency key missing", section: "section-2.1"}
	problemKeyMalformed = problem{status: http.StatusBadRequest, slug: "key-malformed", title: "Idempotency key malformed", section: "section-2.1"}
	problemScope        = problem{status: http.StatusUnauthorized, slug: "caller-unknown", title: "Caller not identified",
		detail: "The caller could not be identified, and idempotency keys belong to a caller. Authenticate and retry with the same key."}
	problemScopeRequired = problem{status: http.StatusInternalServerError, slug: "scope-required", title: "Caller scope not configured",
		detail: "The service cannot tell which caller this request comes from, so it cannot keep callers' idempotency keys apart. Nothing was processed or stored; the service must be configured to identify callers."}
	problemScopeInvalid = problem{status: http.StatusInternalServerError, slug: "scope-invalid", title: "Caller scope invalid",
		detail: "The service derived an invalid scope for this caller. Nothing was processed or stored."}
	problemBodyTooLarge = problem{status: http.StatusRequestEntityTooLarge, slug: "body-too-large", title: "Request body too large"}
	problemBodyTimeout  = problem{status: http.StatusRequestTimeout, slug: "body-timeout", title: "Request body too slow",
		detail: "The request body did not arrive in time. Nothing was processed or stored; retry with the same key."}
	problemBodyUnreadable = problem{status: http.StatusBadRequest, slug: "body-unreadable", title: "Request body unreadable",
		detail: "The request body could not be read in full (truncated or aborted). Nothing was processed or stored; retry with the same key."}
	problemJSONMalformed = problem{status: http.StatusBadRequest, slug: "json-malformed", title: "Malformed JSON body"}
	problemInProgress    = problem{status: http.StatusConflict, slug: "request-in-progress", title: "Request in progress",
		detail:  "A request with this idempotency key is still being processed. Retry with the same key after Retry-After seconds to get its response.",
		section: "section-2.6"}
	// problemOvertaken answers the client of a run whose lease ran out
	// while it ran (a stall): another attempt took the key over, and its
	// answer, not this run's, is the key's.
	problemOvertaken = problem{status: http.StatusConflict, slug: "request-in-progress", title: "Request in progress",
		detail:  "This attempt ran past its lease and another attempt with this idempotency key took it over; its response is the key's. Retry with the same key after Retry-After seconds to get it.",
		section: "section-2.6"}
	problemKeyReused = problem{status: http.StatusUnprocessableEntity, slug: "key-reused", title: "Idempotency key reused",
		detail:  "This idempotency key was already used for a different request (another method, path, query or body). Use a new key for a new request; retries must send exactly the same request.",
		section: "section-2.2"}
	problemUnavailable = problem{status: http.StatusServiceUnavailable, slug: "store-unavailable", title: "Idempotency store unavailable",
		detail: "The request was not processed because its idempotency key could not be checked. Retry with the same key after Retry-After seconds."}
	problemShuttingDown = problem{status: http.StatusServiceUnavailable, slug: "shutting-down", title: "Server shutting down",
		detail: "This server is stopping and takes no new requests. Nothing was processed or stored; retry with the same key after Retry-After seconds."}
	problemStoreError = problem{status: http.StatusInternalServerError, slug: "store-error", title: "Idempotency store error",
		detail: "The idempotency store gave an answer this service cannot use. Nothing was processed; contact the service."}
	problemResponseTooLarge = problem{slug: "response-too-large", title: "Response too large to replay"}
	problemResponseExpired  = problem{slug: "response-expired", title: "Response expired",
		detail: "This request ran before; its response is no longer kept, only the fact that it ran and its status. It will not run again with this key."}
	problemStoredUnreadable = problem{status: http.StatusInternalServerError, slug: "stored-response-unreadable", title: "Stored response unreadable",
		detail: "The stored outcome of this request cannot be read. The request ran once; contact the service."}
)

// catalogue lists every problem type, for the documentation test.
var catalogue = []*problem{&problemKeyMissing, &problemKeyMalformed, &problemScope, &problemScopeRequired,
	&problemScopeInvalid, &problemBodyTooLarge, &problemBodyTimeout, &problemBodyUnreadable, &problemJSONMalformed,
	&problemInProgress, &problemKeyReused, &problemUnavailable, &problemShuttingDown, &problemStoreError, &problemResponseTooLarge,
	&problemResponseExpired, &problemStoredUnreadable}

// The details of the problems that say something of the request.
const (
	detailKeyMissing       = "This endpoint requires the %s header: a unique value per operation (a UUID works), sent again unchanged on every retry."
	detailKeyMalformed     = "The %s header is malformed: %s. Send 1 to %d visible ASCII characters (a UUID works), as a bare value without spaces, quotes, backslashes or commas, or as an RFC 8941 quoted string."
	detailBodyTooLarge     = "The request body exceeds %d bytes. Nothing was processed or stored."
	detailResponseTooLarge = "The original response had a body of %d bytes, more than the %d bytes kept for replay. The request ran once and this is its status; its body cannot be sent again."
)

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Spec links the draft's section the problem answers (an RFC 9457
	// extension member), for the key's problems.
	Spec string `json:"spec,omitempty"`
}

// body returns p as JSON.
func (p *problem) body(base string) []byte {
	pb := problemBody{Type: base + p.slug, Title: p.title, Status: p.status, Detail: p.detail}
	if p.section != "" {
		pb.Spec = DraftURL + "#" + p.section
	}
	b, _ := json.Marshal(pb)
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
