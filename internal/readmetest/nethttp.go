package readmetest

// README:begin nethttp
import (
	"errors"
	"net/http"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

func netHTTPQuickStart(store *redisstore.Store, createOrder http.HandlerFunc) *http.ServeMux {
	idem := httpmw.New(store, httpmw.Options{
		// Your authentication, through the request context; an error answers 401.
		Scope: func(r *http.Request) (string, error) {
			if id := accountID(r.Context()); id != "" {
				return id, nil
			}
			return "", errors.New("no account")
		},
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idem(createOrder)) // httpmw.Key, DerivedKey, Checkpoint in r.Context()
	return mux
}

// README:end
