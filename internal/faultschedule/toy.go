package faultschedule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bug is a flaw planted in the toy guard (Toy), for the checker to catch.
type Bug string

// The planted bugs. Each is a mistake an idempotency layer can make; the
// toy guard without any is correct on the schedules' faults, and each one
// breaks a property storm.CheckSchedule checks.
const (
	// BugNone: the toy guard as it should be.
	BugNone Bug = ""
	// BugGetThenSet claims with a GET and then a SET: two requests that
	// both GET before either SETs both run.
	BugGetThenSet Bug = "get-then-set claim"
	// BugNoFence completes without checking the fencing token: a run that
	// lost its lease overwrites the outcome of the run that took over, and
	// nothing tells the service its effect should not count.
	BugNoFence Bug = "complete without the fencing token"
	// BugReleaseOnError releases the key on every error, the client giving
	// up included, although the handler made its effect.
	BugReleaseOnError Bug = "release on every error"
	// BugStore5xx stores a 5xx as the outcome, so the transient failure is
	// replayed forever and the operation never runs.
	BugStore5xx Bug = "5xx stored as the outcome"
	// BugAliasBuffer keeps in its replay cache a slice of the response
	// buffer it reuses for the next request.
	BugAliasBuffer Bug = "replay cache aliases the caller's buffer"
	// BugNoTTL claims without a TTL: a key whose owner died is held for
	// ever.
	BugNoTTL Bug = "claim without TTL"
	// BugSkipFingerprint answers from its replay cache without comparing
	// the request's fingerprint.
	BugSkipFingerprint Bug = "fingerprint skipped on the cache's fast path"
)

// Bugs lists the planted bugs.
var Bugs = []Bug{BugGetThenSet, BugNoFence, BugReleaseOnError, BugStore5xx, BugAliasBuffer, BugNoTTL, BugSkipFingerprint}

// toyRecord is a key's record in Redis, as JSON.
type toyRecord struct {
	State  string `json:"s"` // "run" or "done"
	Token  int    `json:"t"`
	FP     string `json:"fp"`
	Status int    `json:"st,omitempty"`
	Body   []byte `json:"b,omitempty"`
}

// toyClaim: KEYS[1]=record KEYS[2]=token counter; ARGV[1]=record template
// with token 0 ARGV[2]=lease ms (0: no TTL) => {0, token} claimed | {1, record}
var toyClaim = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return {1, v} end
local t = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], 600000)
local rec = cjson.decode(ARGV[1])
rec.t = t
if ARGV[2] == '0' then
  redis.call('SET', KEYS[1], cjson.encode(rec))
else
  redis.call('SET', KEYS[1], cjson.encode(rec), 'PX', ARGV[2])
end
return {0, t}`)

// toyComplete: KEYS[1]=record; ARGV[1]=outcome ARGV[2]=token ARGV[3]=check
// the token ("1") => 1 stored | 0 refused
var toyComplete = redis.NewScript(`
if ARGV[3] == '1' then
  local v = redis.call('GET', KEYS[1])
  if not v or cjson.decode(v).t ~= tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', 600000)
return 1`)

// toyRelease: KEYS[1]=record; ARGV[1]=token => 1 released | 0 not ours
var toyRelease = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and cjson.decode(v).t == tonumber(ARGV[1]) and cjson.decode(v).s == 'run' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0`)

// toyCtx carries the run's key and token to the service.
type toyCtx struct{}

type toyRun struct {
	key   string
	token int
}

// Toy is a small idempotency guard written for these tests, over Redis
// with a lease of lease, with bug planted (BugNone for none).
func Toy(bug Bug, lease time.Duration) Guard {
	return func(svc *Service, rdb redis.UniversalClient) (http.Handler, func(), error) {
		t := &toy{bug: bug, lease: lease, rdb: rdb, svc: svc, cache: map[string]toyRecord{}}
		t.next = svc.handler(func(ctx context.Context) (string, int) {
			r, _ := ctx.Value(toyCtx{}).(toyRun)
			return r.key, r.token
		})
		return t, func() {}, nil
	}
}

type toy struct {
	bug   Bug
	lease time.Duration
	rdb   redis.UniversalClient
	svc   *Service
	next  http.Handler

	// mu guards the cache and the response buffers: the aliasing bug is a
	// logical one (a buffer reused while the cache still points into it),
	// not a data race.
	mu    sync.Mutex
	cache map[string]toyRecord
	free  []*bytes.Buffer
}

// toyWriter records the handler's answer into a buffer of the toy's.
type toyWriter struct {
	t      *toy
	h      http.Header
	status int
	buf    *bytes.Buffer
}

func (w *toyWriter) Header() http.Header { return w.h }
func (w *toyWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
func (w *toyWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	return w.buf.Write(p)
}

func (t *toy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "key required", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sum := sha256.Sum256(body)
	fp := hex.EncodeToString(sum[:8])
	ctx := r.Context()

	// The fast path: an outcome this instance has seen.
	t.mu.Lock()
	rec, ok := t.cache[key]
	var cached []byte
	if ok {
		cached = append([]byte(nil), rec.Body...)
	}
	t.mu.Unlock()
	if ok {
		if t.bug != BugSkipFingerprint && rec.FP != fp {
			http.Error(w, "mismatch", http.StatusUnprocessableEntity)
			return
		}
		replay(w, rec.Status, cached)
		return
	}

	recKey, tokKey := "toy:{"+key+"}", "toy:{"+key+"}:t"
	token, existing, err := t.claim(ctx, recKey, tokKey, fp)
	if err != nil {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	if existing != nil {
		switch {
		case existing.State != "done":
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in progress", http.StatusConflict)
		case existing.FP != fp:
			http.Error(w, "mismatch", http.StatusUnprocessableEntity)
		default:
			t.remember(key, *existing, existing.Body)
			replay(w, existing.Status, existing.Body)
		}
		return
	}

	rw := &toyWriter{t: t, h: http.Header{}, buf: t.buffer()}
	t.next.ServeHTTP(rw, r.WithContext(context.WithValue(ctx, toyCtx{}, toyRun{key, token})))
	t.mu.Lock()
	out := append([]byte(nil), rw.buf.Bytes()...)
	t.mu.Unlock()
	status := rw.status
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	switch {
	case status >= 500 && t.bug != BugStore5xx:
		_ = toyRelease.Run(dctx, t.rdb, []string{recKey}, token).Err()
	case ctx.Err() != nil && t.bug == BugReleaseOnError:
		_ = toyRelease.Run(dctx, t.rdb, []string{recKey}, token).Err()
	default:
		done := toyRecord{State: "done", FP: fp, Status: status, Body: out}
		enc, _ := json.Marshal(done)
		check := "1"
		if t.bug == BugNoFence {
			check = "0"
		}
		stored, err := toyComplete.Run(dctx, t.rdb, []string{recKey}, enc, token, check).Int()
		switch {
		case err != nil:
			t.svc.notStored(ctx, keyHash(key), token)
			http.Error(w, "outcome not stored", http.StatusServiceUnavailable)
			t.recycle(rw.buf)
			return
		case stored == 0:
			t.svc.refused(ctx, keyHash(key), token)
			http.Error(w, "lease lost", http.StatusServiceUnavailable)
			t.recycle(rw.buf)
			return
		}
		kept := out
		if t.bug == BugAliasBuffer {
			t.mu.Lock()
			kept = rw.buf.Bytes()
			t.mu.Unlock()
		}
		t.remember(key, done, kept)
	}
	t.recycle(rw.buf)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// claim claims the key: the token of a fresh claim, or the record that
// holds it.
func (t *toy) claim(ctx context.Context, recKey, tokKey, fp string) (int, *toyRecord, error) {
	tmpl, _ := json.Marshal(toyRecord{State: "run", FP: fp})
	ms := strconv.FormatInt(t.lease.Milliseconds(), 10)
	if t.bug == BugNoTTL {
		ms = "0"
	}
	if t.bug == BugGetThenSet {
		v, err := t.rdb.Get(ctx, recKey).Bytes()
		if err == nil {
			var rec toyRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return 0, nil, err
			}
			return 0, &rec, nil
		}
		if !errors.Is(err, redis.Nil) {
			return 0, nil, err
		}
		time.Sleep(5 * time.Millisecond) // the round trip a real network puts between the two
		tok, err := t.rdb.Incr(ctx, tokKey).Result()
		if err != nil {
			return 0, nil, err
		}
		b, _ := json.Marshal(toyRecord{State: "run", Token: int(tok), FP: fp})
		return int(tok), nil, t.rdb.Set(ctx, recKey, b, t.lease).Err()
	}
	res, err := toyClaim.Run(ctx, t.rdb, []string{recKey, tokKey}, tmpl, ms).Slice()
	if err != nil {
		return 0, nil, err
	}
	if len(res) != 2 {
		return 0, nil, errors.New("toy: claim reply")
	}
	if n, _ := res[0].(int64); n == 0 {
		tok, _ := res[1].(int64)
		return int(tok), nil, nil
	}
	s, _ := res[1].(string)
	var rec toyRecord
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		return 0, nil, err
	}
	return 0, &rec, nil
}

func (t *toy) remember(key string, rec toyRecord, body []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec.Body = body
	t.cache[key] = rec
}

func (t *toy) buffer() *bytes.Buffer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		b := t.free[n-1]
		t.free = t.free[:n-1]
		return b
	}
	return new(bytes.Buffer)
}

func (t *toy) recycle(b *bytes.Buffer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b.Reset()
	t.free = append(t.free, b)
}

func replay(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
