package ginmw_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/contracttest"
	"github.com/idemkey/idemkey/redisstore"
)

func init() { gin.SetMode(gin.TestMode) }

func TestContract(t *testing.T) {
	contracttest.Run(t, func(t testing.TB, store *redisstore.Store, opts httpmw.Options, app http.Handler) http.Handler {
		r := gin.New()
		r.Any("/*path", ginmw.New(store, ginmw.OptionsFromHTTP(opts)), gin.WrapH(app))
		return r
	})
}
