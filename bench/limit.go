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
	"strings"
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
	limitThresholdMS = strconv.FormatInt((24*time.Hour - 10*time.Second).Milliseconds(), 10)
	limitRetentionMS = strconv.FormatInt((24 * time.Hour).Milliseconds(), 10)
	// limitFingerprint has the size of ours so that Redis stores and
	// compares as many bytes; the limit computes none.
	limitFingerprint = string(bytes.Repeat([]byte{0xab}, 16))
)

// recordKey returns the record's key name for scope and key, derived as
// redisstore derives it (Store.keys is unexported; the runner's memory phase
// checks that the names match what ours writes).
func recordKey(prefix, scope, key string) string {
	var n [binary.MaxVarintLen64]byte
	h := sha256.New()
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(scope)))])
	h.Write([]byte(scope))
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var tag [22]byte
	base64.RawURLEncoding.Encode(tag[:], sum[:16])
	return prefix + "{" + string(tag[:]) + "}"
}

// limit is the yardstick: a Gin handler that does exactly the Redis work of
// our first execution, two EVALSHA round trips of the real claim.lua and
// complete.lua with equivalent KEYS and ARGV, and none of our Go-side work
// (no key parsing, scope, fingerprint, response capture, heartbeat or
// response encoding). The gap between it and ours is our Go overhead.
type limit struct {
	app         *app
	client      redis.Scripter
	claimSHA    string
	completeSHA string
	tokenBase   string
	tokens      atomic.Uint64
}

// newLimit loads the two scripts with SCRIPT LOAD on loader, once; the
// handler calls them on client.
func newLimit(ctx context.Context, a *app, loader *redis.Client, client redis.Scripter) (*limit, error) {
	claim, err := loader.ScriptLoad(ctx, lua.Claim).Result()
	if err != nil {
		return nil, err
	}
	complete, err := loader.ScriptLoad(ctx, lua.Complete).Result()
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
	keys := []string{recordKey(limitPrefix, limitScope, key)}
	var tok [8]byte
	binary.LittleEndian.PutUint64(tok[:], l.tokens.Add(1))
	token := string(tok[:])
	// The started record, laid out as lua/lua.go says (no recovery point).
	started := "S-" + limitFingerprint + token + "1:" + limitThresholdMS + ":0:0:" +
		strconv.Itoa(len(limitLabel)) + ":" + limitLabel + strconv.FormatInt(time.Now().UnixMilli(), 10)
	reply, err := l.client.EvalSha(ctx, l.claimSHA, keys, started, limitRetentionMS).Slice()
	if err != nil || len(reply) == 0 {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	switch code, _ := reply[0].(int64); code {
	case 1: // owned: run it
	case 2: // replay: "C-", fingerprint, "<attempt>:<status>:", stored
		rec, _ := reply[1].(string)
		att, rest, _ := strings.Cut(rec[18:], ":")
		code, stored, _ := strings.Cut(rest, ":")
		_ = att
		status, _ := strconv.Atoi(code)
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
	completed := make([]byte, 0, 32+len(loc)+1+len(out))
	completed = append(completed, "C-"+limitFingerprint+"1:"+strconv.Itoa(status)+":"...)
	completed = append(append(append(completed, loc...), '\n'), out...)
	if err := l.client.EvalSha(ctx, l.completeSHA, keys, completed, token).Err(); err != nil {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	if loc != "" {
		c.Header("Location", loc)
	}
	c.Data(status, "application/json; charset=utf-8", out)
}
