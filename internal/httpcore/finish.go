package httpcore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// Finish ends the exchange once the handler is done: panicked is nil if it
// returned, else what Run recovered (the panic value, or errExited for a
// handler that called runtime.Goexit). It stops the lease's heartbeat,
// then either stores the outcome, trying for up to the longer of Timeout
// and the store's lease, or, when there is none to store (a panic, an
// early exit, a hijacked connection, Abandon, a status Final refuses),
// ends the lease without one: Interrupt if the run was cut off (its
// context cancelled by Shutdown, MaxDuration or a lost lease), which keeps
// the record for the retry's takeover, else Release. Last it sends the
// held-back response, unless panicked is set or the handler abandoned the
// exchange (a streamed or hijacked response has gone out already), or the
// run was overtaken (its lease ran out and another attempt took the key
// over, so its outcome was refused): then it answers 409 request-in-progress,
// and the client's retry gets the key's one answer. It does
// not re-panic: Run does. Adapters call Run, which calls Finish.
func (x *Exchange) Finish(panicked any) {
	x.stop()
	defer x.cancel(nil)
	h, rec := x.h, x.Recorder
	rec.Commit()

	// The side effect has happened: storing its outcome is worth waiting for
	// up to the lease (no one else may take the key over before it ends),
	// or Timeout if longer. The response is held back meanwhile.
	x.call.init(&x.vals, h.finishClock) // the run's values, none of its cancellation
	ctx := &x.call
	l := x.info.Lease
	kind, err := observe.Completed, error(nil)
	if panicked != nil || rec.hijacked || x.abandoned || !h.o.Final(rec.status) {
		kind = observe.Released
		err = x.giveUp(ctx, panicked)
	} else if err = h.complete(ctx, l, rec); errors.Is(err, redisstore.ErrNotReplicated) {
		h.o.Logger.Warn("idemkey: outcome stored but not acknowledged by enough replicas; a failover now could lose it",
			"status", rec.status, "err", err)
	} else if errors.Is(err, redisstore.ErrVanished) {
		kind = observe.NotStored // the store logs it, once per cause per minute
	} else if errors.Is(err, redisstore.ErrLeaseLost) {
		kind = observe.Fenced
		h.o.Logger.Warn("idemkey: outcome not stored: the lease was lost (another attempt took the key over while this one ran)",
			"status", rec.status, "attempt", l.Attempt)
	} else if err != nil {
		kind = observe.NotStored
		h.o.Logger.Error("idemkey: outcome may not be stored (Redis did not confirm it): a retry gets the replay if the write landed, "+
			"else, after the lease, runs the handler again unless it resumes from a checkpoint; the response was sent anyway",
			"status", rec.status, "err", err)
	}
	if h.obs != nil {
		h.observeFinish(x, kind, err)
	}
	if panicked == nil && !x.abandoned {
		if kind == observe.Fenced && !rec.streaming && !rec.hijacked {
			// Another attempt owns the key now, and its answer is the one
			// every retry gets: this run's own would be a second final
			// answer for the key. The client retries and gets the key's.
			clear(rec.w.Header())
			h.fail(rec.w, &problemOvertaken)
		} else {
			rec.flushHeld()
		}
		x.answered = true
	}
}

// giveUp ends the lease of a run that gave no final answer. A run whose
// context was cancelled (Shutdown, MaxDuration, a lost lease) was cut off
// and may have done its side effect: its record is kept and only the lease
// ends (Interrupt), so the retry takes it over as the next attempt, with the
// last checkpoint. Any other run (a 5xx, a panic) says it committed nothing:
// the key is released (a record with history keeps it even so).
func (x *Exchange) giveUp(ctx context.Context, panicked any) error {
	h, l := x.h, x.info.Lease
	switch {
	case panicked == errExited:
		h.o.Logger.Warn("idemkey: the handler exited (runtime.Goexit) without answering; its key is released", "attempt", l.Attempt)
	case panicked != nil:
		h.o.Logger.Warn("idemkey: the handler panicked; its key is released", "panic", panicked, "attempt", l.Attempt)
	}
	if cause := context.Cause(x.Request.Context()); cause != nil {
		err := l.Interrupt(ctx)
		switch {
		case err == nil:
			h.o.Logger.Warn("idemkey: the run was cut off before it answered; its record is kept, so a retry takes it over as the next attempt",
				"cause", cause, "attempt", l.Attempt)
		case errors.Is(err, redisstore.ErrLeaseLost):
			h.o.Logger.Warn("idemkey: the run was cut off before it answered, and another attempt has taken its key over", "cause", cause, "attempt", l.Attempt)
		default:
			h.o.Logger.Warn("idemkey: the run was cut off before it answered, and ending its lease failed; the key stays held until the lease ends",
				"cause", cause, "err", err)
		}
		return err
	}
	err := l.Release(ctx)
	if err != nil {
		h.o.Logger.Warn("idemkey: release failed; the key stays held until its lease ends", "err", err)
	}
	return err
}

// Abandon says the handler gave no answer (it returned an error to the
// framework without writing, as Gin handlers do with c.Error): Finish
// releases the key and sends nothing, and the caller answers the request.
func (x *Exchange) Abandon() { x.abandoned = true }

// Answered reports whether Finish sent the handler's response (or it was
// streamed): the response on the wire is the stored one and must not change.
func (x *Exchange) Answered() bool { return x.answered || x.Recorder.streaming }

// encBufs are the buffers outcomes are encoded into, as *[]byte: Complete
// copies the outcome into its record, so a buffer is free again once it
// returns.
var encBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled is the largest encoding buffer kept for the next outcome.
const maxPooled = 64 << 10

// complete stores the recorded response as the lease's outcome.
func (h *Guard) complete(ctx context.Context, l *redisstore.Lease, rec *Recorder) error {
	buf := encBufs.Get().(*[]byte)
	resp := h.encode(rec, (*buf)[:0])
	err := l.Complete(ctx, resp)
	if cap(resp.Body) <= maxPooled {
		*buf = resp.Body[:0]
		encBufs.Put(buf)
	}
	return err
}

// encode appends the recorded response's stored form to dst.
func (h *Guard) encode(rec *Recorder, dst []byte) redisstore.Response {
	hdr := rec.storedHeader()
	body := rec.body
	if rec.oversize {
		p := problemResponseTooLarge.with(fmt.Sprintf(detailResponseTooLarge, rec.size, h.o.MaxResponseBytes))
		p.status = rec.status
		body = p.body(h.o.ProblemBase)
		// Without the headers that describe the body, which the problem
		// replaces: a copy (hdr may be the snapshot itself).
		kept := make([]hfield, 0, len(hdr)+1)
		for _, f := range hdr {
			if f.name != "Content-Type" && !slices.Contains(describeBody, f.name) {
				kept = append(kept, f)
			}
		}
		hdr = append(kept, hfield{"Content-Type", []string{"application/problem+json"}})
		sortFields(hdr)
	}
	return redisstore.Response{Code: rec.status, Body: h.o.codec.appendFields(dst, hdr, body, rec.oversize)}
}

// replay writes a stored outcome with Idempotent-Replayed: true.
func (h *Guard) replay(w http.ResponseWriter, stored redisstore.Response) {
	hdr := w.Header()
	body, done, err := h.o.codec.replayInto(hdr, stored.Body)
	if !done && err == nil {
		var resp *StoredResponse
		if resp, err = h.o.codec.Decode(stored.Code, stored.Body); err == nil {
			for k, v := range resp.Header {
				hdr[k] = v
			}
			hdr.Set("Idempotent-Replayed", "true")
			body = resp.Body
		}
	}
	if errors.Is(err, ErrUnknownDictionary) {
		h.o.Logger.Error("idemkey: stored response compressed with a dictionary that Options.Dictionaries no longer holds; keep a replaced dictionary for the retention", "err", err)
		h.fail(w, &problemStoredUnreadable)
		return
	}
	if err != nil {
		h.o.Logger.Error("idemkey: stored response unreadable", "err", err)
		h.fail(w, &problemStoredUnreadable)
		return
	}
	w.WriteHeader(stored.Code)
	_, _ = w.Write(body)
}

// expired answers a retry whose outcome expired but whose tombstone remains:
// the original status, with a response-expired problem, as a replay.
func (h *Guard) expired(w http.ResponseWriter, e *redisstore.ExpiredError) {
	status := e.Code
	if status < 200 || status > 599 {
		status = http.StatusGone
	}
	w.Header().Set("Idempotent-Replayed", "true")
	p := problemResponseExpired
	p.status = status
	p.write(w, h.o.ProblemBase)
}
