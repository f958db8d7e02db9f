package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/internal/loadgen"
	"github.com/idemkey/idemkey/redisstore"
)

const (
	// paymentPath is the endpoint every contender serves.
	paymentPath = "/v1/payments"
	// holdPath is served by our contender only: its handler blocks until
	// released, to hold a key in progress while duplicates get 409.
	holdPath = "/v1/hold"
	// blobPath is served by our contender only: it answers a body of
	// ?size= bytes, to measure Redis memory per stored record.
	blobPath = "/v1/blob"

	keyHeader    = "Idempotency-Key"
	replayHeader = "Idempotent-Replayed"
)

var ginOnce sync.Once

// newEngine returns an empty Gin engine in release mode, with no logger and
// no recovery: the three contenders get exactly the same framework work.
func newEngine() *gin.Engine {
	ginOnce.Do(func() { gin.SetMode(gin.ReleaseMode) })
	return gin.New()
}

type paymentRequest struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// paymentResponse encodes to about 100 bytes of JSON.
type paymentResponse struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// app is the business side of the endpoint, shared by all contenders: it
// counts executions (the side effect) and, during storms, executions per key.
type app struct {
	execs   atomic.Int64
	counter atomic.Pointer[loadgen.ExecCounter]

	holdMu sync.Mutex
	hold   chan struct{} // closed to release the handlers of holdPath
}

// pay is the side effect: it decodes the request, "creates a payment" and
// returns the response. It is the only work the bare contender does.
func (a *app) pay(key string, body []byte) (status int, location string, resp any) {
	var req paymentRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Amount <= 0 {
		return http.StatusBadRequest, "", gin.H{"error": "invalid payment"}
	}
	n := a.execs.Add(1)
	if c := a.counter.Load(); c != nil {
		c.Add(key)
	}
	id := "pay_" + strconv.FormatInt(n, 10)
	return http.StatusCreated, paymentPath + "/" + id, paymentResponse{
		ID: id, Object: "payment", Amount: req.Amount, Currency: req.Currency, Status: "succeeded",
	}
}

// handle is the Gin handler of paymentPath for the bare contender and, behind
// the middleware, for ours.
func (a *app) handle(c *gin.Context) {
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		c.Status(http.StatusBadRequest)
		return
	}
	status, loc, resp := a.pay(c.GetHeader(keyHeader), body)
	if loc != "" {
		c.Header("Location", loc)
	}
	c.JSON(status, resp)
}

// handleHold blocks until releaseHolds is called (or 30s pass), then
// answers like handle.
func (a *app) handleHold(c *gin.Context) {
	a.holdMu.Lock()
	ch := a.hold
	a.holdMu.Unlock()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
	}
	a.handle(c)
}

// armHold makes the handlers of holdPath block from now on.
func (a *app) armHold() {
	a.holdMu.Lock()
	a.hold = make(chan struct{})
	a.holdMu.Unlock()
}

// releaseHolds releases every blocked handler of holdPath.
func (a *app) releaseHolds() {
	a.holdMu.Lock()
	if a.hold != nil {
		close(a.hold)
		a.hold = nil
	}
	a.holdMu.Unlock()
}

// handleBlob answers 201 with a body of exactly ?size= bytes.
func (a *app) handleBlob(c *gin.Context) {
	n, err := strconv.Atoi(c.Query("size"))
	if err != nil || n < 0 || n > 1<<20 {
		c.Status(http.StatusBadRequest)
		return
	}
	a.execs.Add(1)
	c.Header("Location", blobPath+"/1")
	c.Data(http.StatusCreated, "application/octet-stream", []byte(strings.Repeat("x", n)))
}

// bareEngine serves the handler with no idempotency.
func bareEngine(a *app) *gin.Engine {
	r := newEngine()
	r.POST(paymentPath, a.handle)
	return r
}

// oursEngine serves the handler behind ginmw with opts, plus the hold and
// blob routes used by the cost and memory phases.
func oursEngine(a *app, store *redisstore.Store, opts ginmw.Options) *gin.Engine {
	r := newEngine()
	mw := ginmw.New(store, opts)
	r.POST(paymentPath, mw, a.handle)
	r.POST(holdPath, mw, a.handleHold)
	r.POST(blobPath, mw, a.handleBlob)
	return r
}

// server is one contender listening on a loopback port.
type server struct {
	url string
	srv *http.Server
	ln  net.Listener
}

// serve serves h on a free loopback port.
func serve(h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{
		url: "http://" + ln.Addr().String(),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute},
		ln:  ln,
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *server) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}

// roundRobin sends consecutive requests to its hosts in turn, whatever host
// the request names, so that one storm targets several instances.
type roundRobin struct {
	next  http.RoundTripper
	hosts []string
	n     atomic.Uint64
}

func (rr *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	host := rr.hosts[(rr.n.Add(1)-1)%uint64(len(rr.hosts))]
	r := req.Clone(req.Context())
	r.URL.Host, r.Host = host, host
	return rr.next.RoundTrip(r)
}

// newRedisClient returns a client with go-redis defaults, as an application
// would configure it, plus the context deadlines the middleware relies on.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// cmdCounter counts the calls a client makes (a command, or a pipeline of
// them, is one round trip) and the commands it sends.
type cmdCounter struct{ trips, cmds atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var errStatus = errors.New("unexpected response")

func expectStatus(want int, replay bool) func(*http.Response, []byte) error {
	return func(resp *http.Response, body []byte) error {
		if resp.StatusCode != want {
			return fmt.Errorf("%w: status %d, want %d: %.100s", errStatus, resp.StatusCode, want, body)
		}
		if got := resp.Header.Get(replayHeader) == "true"; got != replay {
			return fmt.Errorf("%w: %s %v, want %v", errStatus, replayHeader, got, replay)
		}
		return nil
	}
}
