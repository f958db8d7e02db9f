// Package readmetest holds the README's Go snippets as code that compiles,
// and tests that the README shows them exactly and that every relative link
// in the repository's Markdown resolves. Each snippet sits between the lines
// "// README:begin NAME" and "// README:end" of a file here.
package readmetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// The application the snippets call into: the app's own code, not idemkey's.
type (
	charge  struct{ ID string }
	message struct{ ID, To, Body string }
)

// paymentProvider counts its charges, by idempotency key: the side
// effects TestSnippetsRun counts.
type paymentProvider struct {
	mu      sync.Mutex
	charges map[string]int
}

func (p *paymentProvider) Charge(ctx context.Context, amount int, idempotencyKey string) (*charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.charges == nil {
		p.charges = map[string]int{}
	}
	p.charges[idempotencyKey]++
	return &charge{ID: fmt.Sprintf("ch_%d", len(p.charges))}, nil
}

// Charges returns how many charges each idempotency key made.
func (p *paymentProvider) Charges() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.charges)
}

type emailAPI struct{}

func (emailAPI) Send(ctx context.Context, m message, idempotencyKey string) (string, error) {
	return "em_1", nil
}

var (
	errCardDeclined = errors.New("card declined")
	provider        paymentProvider
	mailer          emailAPI
)

func isTemporary(error) bool          { return false }
func hash(message) string             { return "" }
func requeue(message)                 {}
func ack(message, *redisstore.Result) {}
func deadLetter(message, error)       {}

// statusOf maps the app's errors to statuses: a declined card is the
// client's (402, stored and replayed), anything else a 503 (released).
func statusOf(err error) int {
	if errors.Is(err, errCardDeclined) {
		return http.StatusPaymentRequired
	}
	return http.StatusServiceUnavailable
}

// accountID and userID are the app's authentication: the caller, or an
// error when there is none.
func accountID(*http.Request) (string, error) { return "acct_1", nil }
func userID(c *gin.Context) (string, error) {
	if id := c.GetString("user_id"); id != "" {
		return id, nil
	}
	return "", errors.New("no authenticated user")
}

// app is the API the kit snippet tests: POST /v1/orders on httpmw.
type app struct {
	http.Handler
	mu     sync.Mutex
	orders int
}

func newApp(store *redisstore.Store) *app {
	a := &app{}
	a.Handler = httpmw.New(store, httpmw.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.orders++
		n := a.orders
		a.mu.Unlock()
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, n)
	}))
	return a
}

func (a *app) OrdersCreated() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.orders
}
