package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

// The floor's scripts: one command each.
const (
	floorPrefix = "floor:"
	// floorClaim: KEYS[1]=record ARGV[1]=started value ARGV[2]=ttl ms
	// => 0: claimed | the record as it was (started or completed). Not nil
	// for a claim: go-redis turns a nil reply into an error that costs it
	// ~20 allocations and a few µs to classify.
	floorClaim = `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2]) or 0`
	// floorComplete: KEYS[1]=record ARGV[1]=completed value ARGV[2]=ttl ms => 'OK'
	floorComplete = `return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])`
)

// floor is the least a Redis-backed idempotency layer can do per request:
// a first execution is two EVALSHA round trips of one command each (SET NX
// GET PX to claim, SET PX to store the outcome), a replay, a 409 and a 422
// are one. It keeps a 16-byte fingerprint of the body in the record so that
// a reused key gets 422, and the Location and body of the response so that
// a replay answers like the original, but it has no fencing token, no lease
// (a crashed run holds its key for the whole TTL), no scope, no recovery
// point and no response capture. Ours / floor is what our guarantees and
// our Go work cost together.
type floor struct {
	app         *app
	client      redis.Scripter
	claimSHA    string
	completeSHA string
}

// newFloor loads the two scripts with SCRIPT LOAD on loader, once; the
// handler calls them on client.
func newFloor(ctx context.Context, a *app, loader *redis.Client, client redis.Scripter) (*floor, error) {
	claim, err := loader.ScriptLoad(ctx, floorClaim).Result()
	if err != nil {
		return nil, err
	}
	complete, err := loader.ScriptLoad(ctx, floorComplete).Result()
	if err != nil {
		return nil, err
	}
	return &floor{app: a, client: client, claimSHA: claim, completeSHA: complete}, nil
}

func (f *floor) engine() *gin.Engine {
	r := newEngine()
	r.POST(paymentPath, f.handle)
	return r
}

// The floor's record: 'S' and the fingerprint while the key runs; then 'C',
// the fingerprint, the status as three digits, the Location, a newline and
// the body.
const floorFPLen = 16

// floorFingerprint is a 16-byte fingerprint of body, cheaper than ours
// (FNV-1a twice, no canonical JSON): the floor spends as little Go work as it
// can.
func floorFingerprint(body []byte) [floorFPLen]byte {
	h1, h2 := uint64(14695981039346656037), uint64(1099511628211)
	for _, c := range body {
		h1 = (h1 ^ uint64(c)) * 1099511628211
		h2 = (h2 ^ uint64(c)) * 14695981039346656037
	}
	var fp [floorFPLen]byte
	for i := range 8 {
		fp[i], fp[8+i] = byte(h1>>(8*i)), byte(h2>>(8*i))
	}
	return fp
}

func (f *floor) handle(c *gin.Context) {
	key := c.GetHeader(keyHeader)
	if key == "" {
		c.Status(http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		c.Status(http.StatusBadRequest)
		return
	}
	ctx := c.Request.Context()
	rec := []string{floorPrefix + key}
	fp := floorFingerprint(body)
	started := make([]byte, 0, 1+floorFPLen)
	started = append(append(started, 'S'), fp[:]...)
	reply, err := f.client.EvalSha(ctx, f.claimSHA, rec, started, limitRetentionMS).Result()
	if err != nil {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	old, isRecord := reply.(string)
	switch {
	case !isRecord: // 0: claimed
	case len(old) < 1+floorFPLen || old[1:1+floorFPLen] != string(fp[:]):
		c.Status(http.StatusUnprocessableEntity)
		return
	case old[0] == 'S':
		c.Header("Retry-After", "1")
		c.Status(http.StatusConflict)
		return
	default: // 'C': replay
		stored := old[1+floorFPLen:]
		status, _ := strconv.Atoi(stored[:3])
		loc, out, _ := bytes.Cut([]byte(stored[3:]), []byte{'\n'})
		h := c.Writer.Header()
		h["Location"] = []string{string(loc)}
		h[replayHeader] = []string{"true"}
		c.Data(status, "application/json; charset=utf-8", out)
		return
	}

	status, loc, resp := f.app.pay(key, body)
	out, _ := json.Marshal(resp)
	completed := make([]byte, 0, 1+floorFPLen+3+len(loc)+1+len(out))
	completed = append(append(completed, 'C'), fp[:]...)
	completed = strconv.AppendInt(completed, int64(status), 10)
	completed = append(append(append(completed, loc...), '\n'), out...)
	if err := f.client.EvalSha(ctx, f.completeSHA, rec, completed, limitRetentionMS).Err(); err != nil {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	if loc != "" {
		c.Header("Location", loc)
	}
	c.Data(status, "application/json; charset=utf-8", out)
}
