package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// apiError is an error answer of the email API.
type apiError struct {
	Code int
	Msg  string
}

func (e *apiError) Error() string { return fmt.Sprintf("email API: %d %s", e.Code, e.Msg) }

// emailAPI stands in for an external email, SMS or payment API. Like most
// such APIs it accepts an idempotency key and, given one it has seen, returns
// the earlier result without sending again. It counts every call, so the
// example can show that the consumers call it once per message. It is safe
// for concurrent use.
type emailAPI struct {
	latency time.Duration

	mu        sync.Mutex
	flaky     map[string]bool   // message IDs whose next call fails with 503
	callCount map[string]int    // message ID -> calls
	sentByKey map[string]string // idempotency key -> email ID
	sentMsg   map[string]int    // message ID -> emails sent
}

func newEmailAPI(latency time.Duration, flaky ...string) *emailAPI {
	a := &emailAPI{latency: latency, flaky: map[string]bool{},
		callCount: map[string]int{}, sentByKey: map[string]string{}, sentMsg: map[string]int{}}
	for _, id := range flaky {
		a.flaky[id] = true
	}
	return a
}

// send sends m's email once per idempotency key.
func (a *emailAPI) send(ctx context.Context, key string, m message) (string, error) {
	select { // the network round trip
	case <-time.After(a.latency):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.callCount[m.ID]++
	switch {
	case a.flaky[m.ID]:
		delete(a.flaky, m.ID)
		return "", &apiError{Code: 503, Msg: "service unavailable, try again"}
	case !strings.Contains(m.To, "@"):
		return "", &apiError{Code: 400, Msg: "invalid recipient " + m.To}
	}
	if id, ok := a.sentByKey[key]; ok {
		return id, nil // the API's own dedupe; idemkey keeps it from being needed
	}
	id := fmt.Sprintf("email_%d", len(a.sentByKey)+1)
	a.sentByKey[key] = id
	a.sentMsg[m.ID]++
	return id, nil
}

func (a *emailAPI) calls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.callCount {
		n += c
	}
	return n
}

func (a *emailAPI) callsFor(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.callCount[id]
}

func (a *emailAPI) sentCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sentByKey)
}

func (a *emailAPI) sentFor(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sentMsg[id]
}
