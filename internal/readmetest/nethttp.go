package readmetest

import (
	"net/http"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// README:begin nethttp
func netHTTPQuickStart(store *redisstore.Store, createOrder http.HandlerFunc) *http.ServeMux {
	idem := httpmw.New(store, httpmw.Options{
		Scope: accountID, // the caller's account (not its token: a refreshed one would run the retry again), or an error (401)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idem(createOrder)) // httpmw.Key, DerivedKey, Checkpoint in r.Context()
	return mux
}

// README:end
