package httpmw_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// The middleware on one route of a standard mux, with the caller's account
// as the scope. An embedded miniredis stands in for Redis.
func ExampleNew() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.Options{})
	if err != nil {
		panic(err)
	}

	idem := httpmw.New(store, httpmw.Options{
		// Your authentication decides who the caller is.
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-Account"), nil },
	})
	orders := 0
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":"ord_%d"}`, orders)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Account", "acct_1")
		req.Header.Set("Idempotency-Key", "order-form-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			var p struct{ Title string }
			_ = json.Unmarshal(b, &p)
			b = []byte(p.Title)
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b))
	}
	send(`{"sku":"A1","qty":2}`)
	send(`{"qty":2, "sku":"A1"}`) // the same order, reordered: a replay
	send(`{"sku":"A1","qty":3}`)  // the key reused for another order
	fmt.Println("orders:", orders)
	// Output:
	// 201  {"order":"ord_1"}
	// 201 true {"order":"ord_1"}
	// 422  Idempotency key reused
	// orders: 1
}
