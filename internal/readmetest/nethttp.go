package readmetest

// README:begin nethttp
import (
	"net/http"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

func netHTTPQuickStart(store *redisstore.Store, createOrder http.HandlerFunc) *http.ServeMux {
	idem := httpmw.New(store, httpmw.Options{
		// Your authentication, through the request context.
		Scope: func(r *http.Request) (string, error) { return accountID(r.Context()), nil },
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idem(createOrder)) // httpmw.Key, DerivedKey, Checkpoint in r.Context()
	return mux
}

// README:end
