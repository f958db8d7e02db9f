package readmetest

import (
	"net/http"
	"testing"

	"github.com/idemkey/idemkey/idemkeytest"
	"github.com/idemkey/idemkey/redisstore"
)

// README:begin kit
func TestCreateOrder(t *testing.T) {
	store, rdb := idemkeytest.NewStore(t, redisstore.Options{}) // embedded Redis; or your own
	app := newApp(store)                                        // your handler, on that store
	idemkeytest.Run(t, app, idemkeytest.Config{
		Path:        "/v1/orders",
		Body:        []byte(`{"sku":"book","qty":1}`),
		Header:      http.Header{"Authorization": {"Bearer alice"}},
		OtherHeader: http.Header{"Authorization": {"Bearer bob"}}, // another caller, for the scope check
		SideEffects: app.OrdersCreated,                            // your count of what must happen once
		Redis:       rdb,                                          // every record must have a TTL
	})
}

// README:end
