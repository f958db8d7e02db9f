package httpmw_test

import (
	"net/http"
	"testing"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/contracttest"
	"github.com/idemkey/idemkey/redisstore"
)

func TestContract(t *testing.T) {
	contracttest.Run(t, func(t testing.TB, store *redisstore.Store, opts httpmw.Options, app http.Handler) http.Handler {
		return httpmw.New(store, opts)(app)
	})
}
