package readmetest

import (
	"net/http"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// README:begin nethttp
func netHTTPQuickStart(store *redisstore.Store, createOrder http.HandlerFunc) *http.ServeMux {
	idem := httpmw.New(store, httpmw.Options{
		Scope: accountID, // your authentication: the caller's account, or an error (401)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idem(createOrder)) // httpmw.Key, DerivedKey, Checkpoint in r.Context()
	return mux
}

// README:end
