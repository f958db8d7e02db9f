package storm

import (
	"encoding/json"
	"net/http"
	"strings"
)

// maxProblemBytes bounds the problem+json replay bodies read to recognise
// the response-too-large problem.
const maxProblemBytes = 16 << 10

// notFinal reports whether a status without the replay header asks the
// client to come back later rather than answering: 408, 409, 425, 429 and
// 503, the statuses a correct server answers without running the request,
// or after releasing the key.
func notFinal(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly,
		http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// isTooLarge reports whether body is the response-too-large problem that
// idemkey replays in place of a body over MaxResponseBytes: a problem whose
// type ends in "response-too-large" and whose status is the response's.
func isTooLarge(body []byte, status int) bool {
	if len(body) > maxProblemBytes {
		return false
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	return json.Unmarshal(body, &p) == nil && strings.HasSuffix(p.Type, "response-too-large") && p.Status == status
}
