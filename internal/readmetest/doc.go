// Package readmetest holds the README's Go snippets as code that compiles,
// and tests that the README shows them exactly and that every relative link
// in the repository's Markdown resolves. Each snippet sits between the lines
// "// README:begin NAME" and "// README:end" of a file here.
package readmetest

import (
	"context"
	"errors"
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
