package payments

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

// Fault drills, named by the X-Demo-Fault request header when
// Config.Faults is set.
const (
	// FaultHeader is the request header that asks for a fault drill.
	FaultHeader = "X-Demo-Fault"
	// FaultProviderUnavailable makes the provider fail before charging: the
	// API answers 503 and the key is released, so a retry charges.
	FaultProviderUnavailable = "provider-unavailable"
	// FaultCrashAfterCharge calls Config.Crash right after the charged
	// checkpoint, as if the process died between charging and answering.
	FaultCrashAfterCharge = "crash-after-charge"
	// FaultDropResponse lets the request run and its outcome be stored,
	// then closes the connection instead of answering, so the client sees
	// a transport error after the work is done: where real retries come
	// from. Only an execution's answer is dropped; a retry with the same
	// key gets the stored answer (replays, 409s and refusals are answered).
	FaultDropResponse = "drop-response"
)

// RecoveryCharged is the recovery point the handler checkpoints once the
// provider has charged, with a Charged as JSON for its data.
const RecoveryCharged = "charged"

// Charged is the data of the RecoveryCharged checkpoint: what an attempt
// that takes over needs to finish the payment without charging again.
type Charged struct {
	// Charge is the provider's charge.
	Charge Charge `json:"charge"`
	// PaymentID is the ID the payment is recorded under, chosen before the
	// checkpoint so that every attempt records the same payment.
	PaymentID string `json:"payment_id"`
}

// ProblemBase prefixes the type URI of the API's own problem responses.
const ProblemBase = "https://github.com/idemkey/idemkey/blob/main/examples/payments/README.md#"

// Config configures the API. Only Redis is required.
type Config struct {
	// Redis holds the demo's own data: the provider's charges and dedupe
	// records, and the payments. Required.
	Redis redis.UniversalClient

	// Store keeps the idempotency records. Default: a redisstore on Redis
	// with its defaults (prefix "idem:", lease 10s, retention 24h).
	Store *redisstore.Store

	// Idempotency configures the middleware on POST /v1/payments. If its
	// Scope is nil it is set to CallerScope, the authenticated caller from
	// the Gin context. Default: the zero Options plus that Scope.
	Idempotency ginmw.Options

	// Prefix starts every Redis key of the demo's data; it must differ from
	// the store's prefix. Default: "demo:".
	Prefix string

	// ProviderLatency is how long each provider call takes. Default: 0.
	ProviderLatency time.Duration

	// DataTTL is how long payments live in Redis. The provider keeps its
	// dedupe records for the store's Retention instead: a record created
	// before our idempotency record completes then ends before it, so a key
	// a client reuses after our retention never meets a stale charge.
	// Default: 7 days.
	DataTTL time.Duration

	// Faults enables the X-Demo-Fault header (see FaultProviderUnavailable
	// and FaultCrashAfterCharge); without it the header is ignored.
	// Default: false.
	Faults bool

	// Crash is what FaultCrashAfterCharge calls. It should not return; if it
	// does, the handler aborts the request as if the connection broke, so
	// nothing is answered or stored. Default: exit the process with status 3
	// at once, running no deferred functions.
	Crash func()

	// Logger receives errors the client is not told about. Default:
	// slog.Default().
	Logger *slog.Logger
}

// API is the payments API: an http.Handler with the routes
//
//	POST /v1/payments        create a payment (Idempotency-Key required)
//	GET  /v1/payments/:id    read one of the caller's payments
//	GET  /v1/stats           side-effect counters
//
// Both payment routes need "Authorization: Bearer <token>"; the token
// identifies the caller. An API is safe for concurrent use.
type API struct {
	cfg      Config
	provider *Provider
	engine   *gin.Engine
}

var _ http.Handler = (*API)(nil)

// New returns the API configured by cfg. It returns an error if cfg.Redis is
// nil or the default store cannot be built; it does not contact Redis.
func New(cfg Config) (*API, error) {
	if cfg.Redis == nil {
		return nil, errors.New("payments: Config.Redis is required")
	}
	if cfg.Store == nil {
		s, err := redisstore.New(cfg.Redis, redisstore.Options{})
		if err != nil {
			return nil, err
		}
		cfg.Store = s
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "demo:"
	}
	if cfg.Prefix == cfg.Store.Options().Prefix {
		return nil, fmt.Errorf("payments: Config.Prefix %q is the store's prefix", cfg.Prefix)
	}
	if cfg.DataTTL <= 0 {
		cfg.DataTTL = 7 * 24 * time.Hour
	}
	if cfg.Idempotency.Scope == nil {
		cfg.Idempotency.Scope = CallerScope
	}
	if cfg.Crash == nil {
		cfg.Crash = func() { os.Exit(3) }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &API{
		cfg:      cfg,
		provider: &Provider{rdb: cfg.Redis, prefix: cfg.Prefix, latency: cfg.ProviderLatency, ttl: cfg.Store.Options().Retention},
	}

	r := gin.New()
	r.Use(a.recoverer)
	r.POST("/v1/payments", a.authenticate, a.checkFault, a.dropResponse, ginmw.New(cfg.Store, cfg.Idempotency), a.createPayment)
	r.GET("/v1/payments/:id", a.authenticate, a.getPayment)
	r.GET("/v1/stats", a.stats)
	r.NoRoute(func(c *gin.Context) {
		writeProblem(c, http.StatusNotFound, "not_found", "Not found", "No such route: "+c.Request.Method+" "+c.Request.URL.Path+".")
	})
	a.engine = r
	return a, nil
}

// ServeHTTP serves the API's routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.engine.ServeHTTP(w, r) }

// Provider returns the simulated payment provider the API charges.
func (a *API) Provider() *Provider { return a.provider }

// Payment is a payment the API created, as its JSON answers show it.
type Payment struct {
	// ID is "pay_" and 24 hex digits, chosen by the attempt that charged.
	ID string `json:"id"`
	// Amount is in minor units.
	Amount int64 `json:"amount"`
	// Currency is the request's, upper-cased.
	Currency string `json:"currency"`
	// Customer is the customer charged.
	Customer string `json:"customer"`
	// Status is always "succeeded": failed payments are not recorded.
	Status string `json:"status"`
	// Charge is the provider's charge ID.
	Charge string `json:"charge"`
}

// paymentRequest is the body of POST /v1/payments.
type paymentRequest struct {
	Amount   json.Number `json:"amount"`
	Currency string      `json:"currency"`
	Customer string      `json:"customer"`
}

// createPayment charges once and records the payment once. The middleware
// has claimed the key; on a takeover the lease carries the previous
// attempt's recovery point, and a charge already made is reused instead of
// made again.
func (a *API) createPayment(c *gin.Context) {
	ctx := c.Request.Context()
	var req paymentRequest
	dec := json.NewDecoder(c.Request.Body)
	dec.UseNumber()
	err := dec.Decode(&req)
	if err == nil {
		if _, tail := dec.Token(); tail != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err != nil {
		writeProblem(c, http.StatusBadRequest, "invalid_request", "Invalid payment request",
			"The body must be a JSON object {\"amount\": <integer>, \"currency\": \"<3 letters>\", \"customer\": \"<id>\"}: "+err.Error()+".")
		return
	}
	amount, problems := validate(&req)
	if len(problems) > 0 {
		writeProblem(c, http.StatusBadRequest, "invalid_request", "Invalid payment request", strings.Join(problems, "; ")+".")
		return
	}
	currency := strings.ToUpper(req.Currency)

	var done Charged
	if point, data := ginmw.RecoveryPoint(c); point == RecoveryCharged && json.Unmarshal(data, &done) == nil && done.PaymentID != "" {
		a.cfg.Logger.Info("payments: resuming after the charge", "key", ginmw.Key(c), "charge", done.Charge.ID, "attempt", ginmw.Attempt(c))
	} else {
		// A charge made by an attempt that died before its checkpoint comes
		// back from the provider's dedupe on the derived key.
		ch, err := a.provider.Charge(ctx, ChargeRequest{
			IdempotencyKey: ginmw.DerivedKey(c, "charge"),
			Amount:         amount,
			Currency:       currency,
			Customer:       req.Customer,
			SimulateOutage: a.fault(c) == FaultProviderUnavailable,
		})
		switch {
		case errors.Is(err, ErrDeclined):
			writeProblem(c, http.StatusPaymentRequired, "card_declined", "Card declined",
				"The provider declined the charge; nothing was charged. Ask the customer for another payment method.")
			return
		case errors.Is(err, ErrProviderUnavailable):
			c.Header("Retry-After", "1")
			writeProblem(c, http.StatusServiceUnavailable, "provider_unavailable", "Payment provider unavailable",
				"The charge did not go through. Retry with the same Idempotency-Key: the provider dedupes on it, so the card is charged at most once.")
			return
		case err != nil:
			a.cfg.Logger.Error("payments: charge failed", "key", ginmw.Key(c), "err", err)
			writeProblem(c, http.StatusInternalServerError, "internal", "Internal error", "The payment could not be made.")
			return
		}
		done = Charged{Charge: ch, PaymentID: "pay_" + randomHex(12)}
		data, _ := json.Marshal(done)
		if err := ginmw.Checkpoint(c, RecoveryCharged, data); err != nil {
			// The charge stands either way: the provider dedupes a retry's
			// charge on the same derived key.
			a.cfg.Logger.Warn("payments: checkpoint failed", "key", ginmw.Key(c), "charge", ch.ID, "err", err)
			c.Header("Retry-After", "1")
			writeProblem(c, http.StatusServiceUnavailable, "unavailable", "Service unavailable",
				"The payment could not be completed. Retry with the same Idempotency-Key; the card will not be charged twice.")
			return
		}
		if a.fault(c) == FaultCrashAfterCharge {
			a.cfg.Crash()
			panic(http.ErrAbortHandler)
		}
	}

	p := Payment{
		// A resumed attempt has the same ID from the checkpoint, so it finds
		// the payment an earlier attempt recorded instead of adding one.
		ID:       done.PaymentID,
		Amount:   amount,
		Currency: currency,
		Customer: req.Customer,
		Status:   "succeeded",
		Charge:   done.Charge.ID,
	}
	body, err := a.recordPayment(ctx, p, c.GetString(scopeKey))
	if err != nil {
		a.cfg.Logger.Warn("payments: recording the payment failed", "key", ginmw.Key(c), "charge", p.Charge, "err", err)
		c.Header("Retry-After", "1")
		writeProblem(c, http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			"The payment could not be completed. Retry with the same Idempotency-Key; the card will not be charged twice.")
		return
	}
	c.Header("Location", "/v1/payments/"+p.ID)
	c.Data(http.StatusCreated, "application/json", body)
}

// validate checks a parsed body and returns its amount, or what is wrong.
func validate(req *paymentRequest) (int64, []string) {
	var problems []string
	amount, err := req.Amount.Int64()
	if err != nil || amount <= 0 {
		problems = append(problems, "amount must be a positive integer in minor units")
	}
	if !isCurrency(req.Currency) {
		problems = append(problems, "currency must be 3 letters (ISO 4217)")
	}
	if req.Customer == "" {
		problems = append(problems, "customer is required")
	}
	return amount, problems
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range len(s) {
		if c := s[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// recordScript stores a payment once and counts it; a repeat returns the
// stored body. Its keys share the {payments} hash tag.
var recordScript = redis.NewScript(`
-- KEYS[1]=payment KEYS[2]=payments counter; ARGV[1]=body ARGV[2]=owner scope ARGV[3]=TTL (ms)
-- => the stored body
local body = redis.call('HGET', KEYS[1], 'body')
if body then return body end
redis.call('HSET', KEYS[1], 'body', ARGV[1], 'owner', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('INCR', KEYS[2])
return ARGV[1]
`)

func (a *API) paymentKey(id string) string { return a.cfg.Prefix + "{payments}:payment:" + id }

// recordPayment stores p for owner unless it is stored already, and returns
// the stored JSON.
func (a *API) recordPayment(ctx context.Context, p Payment, owner string) ([]byte, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	keys := []string{a.paymentKey(p.ID), a.cfg.Prefix + "{payments}:created"}
	stored, err := recordScript.Run(ctx, a.cfg.Redis, keys, body, owner, a.cfg.DataTTL.Milliseconds()).Text()
	if err != nil {
		return nil, err
	}
	return []byte(stored), nil
}

// getPayment answers one of the caller's payments; another caller's is 404,
// as if it did not exist.
func (a *API) getPayment(c *gin.Context) {
	vals, err := a.cfg.Redis.HMGet(c.Request.Context(), a.paymentKey(c.Param("id")), "body", "owner").Result()
	if err != nil {
		a.cfg.Logger.Warn("payments: reading a payment failed", "err", err)
		c.Header("Retry-After", "1")
		writeProblem(c, http.StatusServiceUnavailable, "unavailable", "Service unavailable", "Retry later.")
		return
	}
	body, _ := vals[0].(string)
	owner, _ := vals[1].(string)
	if body == "" || owner != c.GetString(scopeKey) {
		writeProblem(c, http.StatusNotFound, "payment_not_found", "Payment not found", "No payment "+c.Param("id")+" for this caller.")
		return
	}
	c.Data(http.StatusOK, "application/json", []byte(body))
}

// Stats counts the side effects, as GET /v1/stats shows them.
type Stats struct {
	// PaymentsCreated counts payments recorded.
	PaymentsCreated int64 `json:"payments_created"`
	// ProviderCharges counts charges the provider made.
	ProviderCharges int64 `json:"provider_charges"`
	// ProviderDeduplicated counts charge calls the provider answered from
	// its dedupe record instead of charging.
	ProviderDeduplicated int64 `json:"provider_deduplicated"`
}

// Stats reads the counters from Redis.
func (a *API) Stats(ctx context.Context) (Stats, error) {
	var cmds [3]*redis.StringCmd
	_, err := a.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmds[0] = p.Get(ctx, a.cfg.Prefix+"{payments}:created")
		cmds[1] = p.Get(ctx, a.cfg.Prefix+"{provider}:charges")
		cmds[2] = p.Get(ctx, a.cfg.Prefix+"{provider}:deduplicated")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, err
	}
	var n [3]int64
	for i, cmd := range cmds {
		v, err := cmd.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Stats{}, err
		}
		n[i] = v
	}
	return Stats{PaymentsCreated: n[0], ProviderCharges: n[1], ProviderDeduplicated: n[2]}, nil
}

func (a *API) stats(c *gin.Context) {
	s, err := a.Stats(c.Request.Context())
	if err != nil {
		a.cfg.Logger.Warn("payments: reading stats failed", "err", err)
		c.Header("Retry-After", "1")
		writeProblem(c, http.StatusServiceUnavailable, "unavailable", "Service unavailable", "Retry later.")
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, s)
}

// Scope returns the idempotency scope of the caller presenting token: a
// hash of it, so that the scope stored in each record is no credential.
// Use it to find a caller's records, as "idemkey inspect --bearer" does.
func Scope(token string) string {
	sum := sha256.Sum256([]byte("idemkey payments caller\x00" + token))
	return "tok:" + base64.RawURLEncoding.EncodeToString(sum[:18])
}

// CallerScope is the default Config.Idempotency.Scope: the caller the
// authentication middleware put in the Gin context (Scope of its bearer
// token). Empty if authentication did not run, which the middleware refuses.
func CallerScope(c *gin.Context) (string, error) { return c.GetString(scopeKey), nil }

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

const scopeKey = "payments.scope"

// authenticate identifies the caller before anything else runs; a real API
// would check the token here too. It runs before the idempotency
// middleware, so an unauthenticated request never claims a key.
func (a *API) authenticate(c *gin.Context) {
	token, ok := bearerToken(c.Request)
	if !ok {
		c.Header("WWW-Authenticate", "Bearer")
		writeProblem(c, http.StatusUnauthorized, "unauthorized", "Unauthorized", "Send Authorization: Bearer <token>.")
		c.Abort()
		return
	}
	c.Set(scopeKey, Scope(token))
}

// checkFault refuses an unknown fault drill before the key is claimed, so
// that a typo is not stored as the key's outcome.
func (a *API) checkFault(c *gin.Context) {
	switch f := a.fault(c); f {
	case "", FaultProviderUnavailable, FaultCrashAfterCharge, FaultDropResponse:
	default:
		writeProblem(c, http.StatusBadRequest, "unknown_fault", "Unknown fault drill",
			fmt.Sprintf("%s must be %s, %s or %s, not %q.", FaultHeader, FaultProviderUnavailable, FaultCrashAfterCharge, FaultDropResponse, f))
		c.Abort()
	}
}

// fault returns the fault drill the request asks for, or "" when there is
// none or drills are off.
func (a *API) fault(c *gin.Context) string {
	if !a.cfg.Faults {
		return ""
	}
	return strings.TrimSpace(c.GetHeader(FaultHeader))
}

// recoverer turns a panic into a 500, except http.ErrAbortHandler, which
// goes on to net/http so the connection is dropped without an answer.
func (a *API) recoverer(c *gin.Context) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
			panic(p)
		}
		a.cfg.Logger.Error("payments: handler panicked", "panic", p)
		if !c.Writer.Written() {
			writeProblem(c, http.StatusInternalServerError, "internal", "Internal error", "The request failed.")
		}
		c.Abort()
	}()
	c.Next()
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

// writeProblem answers an RFC 9457 problem whose code is also the anchor of
// its type.
func writeProblem(c *gin.Context, status int, code, title, detail string) {
	b, _ := json.Marshal(problemBody{Type: ProblemBase + code, Title: title, Status: status, Detail: detail, Code: code})
	c.Data(status, "application/problem+json", b)
}
