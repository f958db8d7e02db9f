package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/lua"
)

// The limit contender stores records as redisstore does by default.
const (
	limitPrefix = "idem:"
	// limitScope is the scope httpcore.DefaultScope gives a request with
	// no credential, which is what the load generators send.
	limitScope = "anonymous"
	limitLabel = "POST " + paymentPath
)

var (
	limitLeaseMS     = strconv.FormatInt((10 * time.Second).Milliseconds(), 10)
	limitRetentionMS = strconv.FormatInt((24 * time.Hour).Milliseconds(), 10)
	// limitFingerprint has the size of ours (a raw SHA-256) so that Redis
	// stores and compares as many bytes; the limit computes none.
	limitFingerprint = string(bytes.Repeat([]byte{0xab}, sha256.Size))
)

// recordKeys returns the record and lease key names for scope and key,
// derived as redisstore derives them (Store.keys is unexported; the runner's
// memory phase checks that the names match what ours writes).
func recordKeys(prefix, scope, key string) [2]string {
	var n [binary.MaxVarintLen64]byte
	h := sha256.New()
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(scope)))])
	h.Write([]byte(scope))
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var tag [22]byte
	base64.RawURLEncoding.Encode(tag[:], sum[:16])
	rec := prefix + "{" + string(tag[:]) + "}"
	return [2]string{rec, rec + ":lease"}
}

// limit is the yardstick: a Gin handler that does exactly the Redis work of
// our first execution, two EVALSHA round trips of the real claim.lua and
// complete.lua with equivalent KEYS and ARGV, and none of our Go-side work
// (no key parsing, scope, fingerprint, response capture, heartbeat or
// response encoding). The gap between it and ours is our Go overhead.
type limit struct {
	app         *app
	client      *redis.Client
	claimSHA    string
	completeSHA string
	tokenBase   string
	tokens      atomic.Uint64
}

// newLimit loads the two scripts with SCRIPT LOAD, once.
func newLimit(ctx context.Context, a *app, client *redis.Client) (*limit, error) {
	claim, err := client.ScriptLoad(ctx, lua.Claim).Result()
	if err != nil {
		return nil, err
	}
	complete, err := client.ScriptLoad(ctx, lua.Complete).Result()
	if err != nil {
		return nil, err
	}
	return &limit{app: a, client: client, claimSHA: claim, completeSHA: complete,
		tokenBase: strconv.FormatInt(time.Now().UnixNano(), 36)}, nil
}

func (l *limit) engine() *gin.Engine {
	r := newEngine()
	r.POST(paymentPath, l.handle)
	return r
}

// handle claims, runs the payment, completes and answers. A replay answers
// the stored response (Location, a newline, the body) in one round trip.
func (l *limit) handle(c *gin.Context) {
	key := c.GetHeader(keyHeader)
	if key == "" {
		c.Status(http.StatusBadRequest)
		return
	}
	ctx := c.Request.Context()
	keys := recordKeys(limitPrefix, limitScope, key)
	token := l.tokenBase + "." + strconv.FormatUint(l.tokens.Add(1), 36)
	// The record's inspection fields, in one argument as redisstore packs them.
	meta := limitScope + key + limitLabel + strconv.FormatInt(time.Now().UnixMilli(), 10)
	reply, err := l.client.EvalSha(ctx, l.claimSHA, keys[:], limitFingerprint, token,
		limitLeaseMS, limitRetentionMS, meta).Slice()
	if err != nil || len(reply) == 0 {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	switch code, _ := reply[0].(int64); code {
	case 1: // owned: run it
	case 2: // replay
		status, _ := reply[1].(int64)
		stored, _ := reply[2].(string)
		loc, body, _ := bytes.Cut([]byte(stored), []byte{'\n'})
		h := c.Writer.Header()
		h["Location"] = []string{string(loc)}
		h[replayHeader] = []string{"true"}
		c.Data(int(status), "application/json; charset=utf-8", body)
		return
	case 3:
		c.Status(http.StatusConflict)
		return
	default:
		c.Status(http.StatusUnprocessableEntity)
		return
	}

	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		c.Status(http.StatusBadRequest)
		return
	}
	status, loc, resp := l.app.pay(key, body)
	out, _ := json.Marshal(resp)
	stored := make([]byte, 0, len(loc)+1+len(out))
	stored = append(append(append(stored, loc...), '\n'), out...)
	if err := l.client.EvalSha(ctx, l.completeSHA, keys[:], token, strconv.Itoa(status), stored,
		limitRetentionMS).Err(); err != nil {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	if loc != "" {
		c.Header("Location", loc)
	}
	c.Data(status, "application/json; charset=utf-8", out)
}
