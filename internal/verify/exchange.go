package verify

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// exchange is one request and what came back.
type exchange struct {
	status int
	header http.Header
	body   []byte
	err    error
	sentAt time.Time
	doneAt time.Time // when the answer was read
}

// replayed reports whether the answer says it is a stored outcome.
func (e *exchange) replayed() bool {
	return e.err == nil && strings.EqualFold(strings.TrimSpace(e.header.Get(idemclient.HeaderReplayed)), "true")
}

// inProgress reports whether the answer is a 409 that is not a replay.
func (e *exchange) inProgress() bool {
	return e.err == nil && e.status == http.StatusConflict && !e.replayed()
}

// original reports whether the answer is an execution, as storm counts
// them: a response that is not a replay, a 409, or one of the "retry
// later" statuses (408, 425, 429, 503).
func (e *exchange) original() bool {
	if e.err != nil || e.replayed() {
		return false
	}
	switch e.status {
	case http.StatusConflict, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return false
	}
	return true
}

// describe says what came back, in a few words: the status, whether it is
// a replay, the content type and the body's size; or the error.
func (e *exchange) describe() string {
	if e.err != nil {
		return "no answer (" + e.err.Error() + ")"
	}
	return statusOf(e) + " (" + e.details() + ")"
}

// details gives the content type and the size of the body.
func (e *exchange) details() string {
	s := fmt.Sprintf("%d bytes", len(e.body))
	if ct := e.header.Get("Content-Type"); ct != "" {
		s = safeText(ct) + ", " + s
	}
	return s
}

// excerpt is the start of the body, quoted, for evidence.
func (e *exchange) excerpt() string {
	s, cut := clip(string(e.body), 160)
	return quoteText(s) + cut
}

// request is one request a check sends.
type request struct {
	key    string // the key; "" with noKey
	noKey  bool
	body   []byte
	url    string      // "" for the target
	header http.Header // nil for Config.Header
	lose   bool        // the target is to lose the answer
	crash  bool        // Config.Crash marks the request
}
