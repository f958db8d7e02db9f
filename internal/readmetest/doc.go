// Package readmetest holds the README's Go snippets as code that compiles,
// and tests that the README shows them exactly and that every relative link
// in the repository's Markdown resolves. Each snippet sits between the lines
// "// README:begin NAME" and "// README:end" of a file here.
package readmetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// The application the snippets call into: the app's own code, not idemkey's.
type (
	charge  struct{ ID string }
	message struct{ ID, To, Body string }
)

type paymentProvider struct{}

func (paymentProvider) Charge(ctx context.Context, amount int, idempotencyKey string) (*charge, error) {
	return &charge{ID: "ch_1"}, nil
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

func isTemporary(error) bool           { return false }
func hash(message) string              { return "" }
func accountID(context.Context) string { return "acct_1" }
func requeue(message)                  {}
func deadLetter(message, error)        {}

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
