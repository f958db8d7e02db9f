package peers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"

	"github.com/idemkey/idemkey/internal/loadgen"
)

const (
	// keyHeader is the request header carrying the idempotency key. Fiber's
	// default is X-Idempotency-Key; it is configured to the IETF draft name
	// that storm sends.
	keyHeader = "Idempotency-Key"
	// replayHeader is what storm recognises as a replay marker.
	replayHeader = "Idempotent-Replayed"
	// path is the endpoint every app serves.
	path = "/v1/payments"
)

// payments numbers the executions of the payment handler across all apps,
// so every execution answers with a fresh id.
var payments atomic.Int64

type paymentRequest struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

type paymentResponse struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// paymentHandler is the endpoint under test: it decodes a small JSON body
// and answers 201 with a fresh payment id. With a counter it also records
// the execution under the request's idempotency key.
func paymentHandler(counter *loadgen.ExecCounter) fiber.Handler {
	return func(c fiber.Ctx) error {
		var req paymentRequest
		if err := json.Unmarshal(c.Body(), &req); err != nil || req.Amount <= 0 {
			return c.Status(fiber.StatusBadRequest).JSON(fiber.Map{"error": "invalid payment"})
		}
		if counter != nil {
			// Fiber strings point into reusable buffers unless the app is
			// Immutable: copy before keeping it.
			counter.Add(strings.Clone(c.Get(keyHeader)))
		}
		n := payments.Add(1)
		return c.Status(fiber.StatusCreated).JSON(paymentResponse{
			ID:       "pay_" + strconv.FormatInt(n, 10),
			Amount:   req.Amount,
			Currency: req.Currency,
		})
	}
}

// markReplays is harness instrumentation for the storm apps: fiber's
// middleware does not mark replayed responses, so this outer middleware
// adds "Idempotent-Replayed: true" when fiber reports, through its own
// idempotency.IsFromCache, that it served the response from storage. It
// runs after the idempotency middleware has stored the response, so the
// marker is never part of what is stored.
func markReplays(c fiber.Ctx) error {
	err := c.Next()
	if idempotency.IsFromCache(c) {
		c.Set(replayHeader, "true")
	}
	return err
}

// appConfig selects what an app is made of.
type appConfig struct {
	// storage enables fiber's idempotency middleware with this storage;
	// nil serves the bare handler.
	storage fiber.Storage
	// counter, when set, counts handler executions per key.
	counter *loadgen.ExecCounter
	// markReplays adds the Idempotent-Replayed marker (storm apps only).
	markReplays bool
}

// server is one fiber app listening on a loopback port.
type server struct {
	app *fiber.App
	url string // base URL, e.g. http://127.0.0.1:41234
	err chan error
}

// startApp builds the app described by cfg and serves it on a free
// loopback port.
func startApp(cfg appConfig) (*server, error) {
	app := fiber.New(fiber.Config{AppName: "peers"})
	if cfg.markReplays {
		app.Use(markReplays)
	}
	if cfg.storage != nil {
		app.Use(idempotency.New(idempotency.Config{
			KeyHeader: keyHeader,
			Storage:   cfg.storage,
			// Everything else is fiber's default: in-memory Lock, 30 min
			// Lifetime, 36-character key check, all response headers kept.
		}))
	}
	app.Post(path, paymentHandler(cfg.counter))

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{app: app, url: "http://" + ln.Addr().String(), err: make(chan error, 1)}
	go func() {
		s.err <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	}()
	if err := waitReady(s); err != nil {
		_ = app.Shutdown()
		return nil, err
	}
	return s, nil
}

// waitReady polls the app until it answers HTTP.
func waitReady(s *server) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get(s.url + "/ready")
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		select {
		case err := <-s.err:
			return fmt.Errorf("fiber app stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fiber app on %s not ready: %w", s.url, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close shuts the app down.
func (s *server) close() {
	_ = s.app.ShutdownWithTimeout(2 * time.Second)
}

// roundRobin is an http.RoundTripper that sends consecutive requests to
// the given hosts in turn, whatever host the request names. It lets one
// storm target several app instances.
type roundRobin struct {
	next  http.RoundTripper
	hosts []string
	n     atomic.Uint64
}

func newRoundRobin(next http.RoundTripper, hosts ...string) (*roundRobin, error) {
	if len(hosts) == 0 {
		return nil, errors.New("round robin needs at least one host")
	}
	return &roundRobin{next: next, hosts: hosts}, nil
}

// RoundTrip implements http.RoundTripper.
func (rr *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	host := rr.hosts[(rr.n.Add(1)-1)%uint64(len(rr.hosts))]
	r := req.Clone(req.Context()) // a RoundTripper must not modify req
	r.URL.Host = host
	r.Host = host
	return rr.next.RoundTrip(r)
}
