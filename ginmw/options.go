package ginmw

import "github.com/gin-gonic/gin"

// ginOptions holds what ginmw.Options has of its own: the fields whose type
// differs from httpmw.Options' (Skip and Scope take the *gin.Context) and
// the fields only Gin has, with their documentation. internal/optgen merges
// them with httpmw.Options into Options (options_gen.go): each field here
// replaces httpmw's of the same name, and a Gin-only field follows the
// field it follows here. Edit this and httpmw/options.go, then run go
// generate ./httpmw.
type ginOptions struct {
	// Skip, if set, lets a request through untouched when it returns true,
	// for routes that need no protection. Default: nil.
	Skip func(c *gin.Context) bool

	// Scope returns the caller a request comes from: the account or user ID
	// your authentication put in the Gin context, such as
	// c.GetString("user_id"). Equal keys from different callers are
	// different records, so one can never see, block or replay another's.
	// It is hashed into the record's name, never stored. An error answers
	// 401 caller-unknown (the error goes to the log, not the client); an
	// empty scope (a missing c.GetString) answers 500 scope-required. Mount
	// the middleware after your authentication, so that the caller is known
	// when it runs. Default: DefaultScope, a hash of the Authorization or
	// X-API-Key header, refusing requests with neither; SharedScope opts
	// into one scope for all. The default follows the credential, not the
	// caller: a mobile client that refreshes its bearer token between two
	// tries of one operation lands in a new scope and the retry runs
	// again, so the middleware logs a warning at its first use; set Scope
	// unless callers present long-lived API keys.
	Scope func(c *gin.Context) (string, error)

	// ErrorHandler is the application's error middleware: the one that
	// renders c.Errors as a response. When a handler records errors with
	// c.Error and writes nothing, the middleware runs ErrorHandler inside
	// the protected run, so that what it writes is the outcome: a 4xx it
	// renders (say, 402 for a declined card) is stored and replayed, a 5xx
	// releases the key, as for any answer. Both usual styles work: a
	// middleware that calls c.Next() first and then renders c.Errors, and
	// a function that only renders them. It may stay registered globally
	// (r.Use) as well, for the other routes: on protected routes it then
	// finds the response written (c.Writer.Written()) and must leave it, as
	// the stored response is final. Without ErrorHandler such a handler has
	// given no answer: the key is released, so every retry runs it again,
	// and the error middleware outside answers (the middleware says so in
	// the log, once). Default: nil.
	ErrorHandler gin.HandlerFunc
}

var _ ginOptions // read by internal/optgen, never used as a value
