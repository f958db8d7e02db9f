// Command nethttp shows httpmw with the standard library's http.ServeMux and
// its Go 1.22 method-and-path patterns:
//
//   - POST /v1/orders is protected: it requires an Idempotency-Key, runs once
//     per (account, key), and every retry gets the stored 201 with its
//     Location and Idempotent-Replayed: true;
//   - GET /v1/orders/{id} is not wrapped at all (reads are safe to repeat);
//   - the handler hands httpmw.DerivedKey(ctx, "fulfil") to a downstream
//     warehouse API, which dedupes on it;
//   - keys are scoped by the account that the app's own authentication
//     middleware found from the API key, through Options.Scope.
//
// With -selftest it sends itself a create, a retry, a concurrent burst, a
// reused key and more, prints each answer and exits:
//
//	go run ./examples/nethttp -selftest
//	go run ./examples/nethttp              # serve on 127.0.0.1:8082
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/idemkey/idemkey/examples/internal/devredis"
	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// apiKeys maps the demo API keys to their accounts.
var apiKeys = map[string]string{"sk_test_alice": "acct_alice", "sk_test_bob": "acct_bob"}

type accountKey struct{}

// authenticate is the app's own authentication: it admits requests with a
// known API key and puts the key's account in the request context.
func authenticate(keys map[string]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acct, ok := keys[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			http.Error(w, "unknown API key", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, acct)))
	})
}

// accountScope is the middleware's Options.Scope: the authenticated account,
// so one account's keys can never replay or block another's. It returns the
// account ID, not the API key, which may rotate between two tries.
func accountScope(r *http.Request) (string, error) {
	acct, ok := r.Context().Value(accountKey{}).(string)
	if !ok {
		return "", errors.New("no authenticated account")
	}
	return acct, nil
}

// order is a created order.
type order struct {
	ID       string `json:"id"`
	SKU      string `json:"sku"`
	Qty      int    `json:"qty"`
	Shipment string `json:"shipment"`
	account  string
}

// shop holds the orders and the warehouse client. It is safe for concurrent use.
type shop struct {
	warehouse *warehouse
	mu        sync.Mutex
	orders    map[string]*order
}

func newShop(w *warehouse) *shop { return &shop{warehouse: w, orders: map[string]*order{}} }

// createOrder runs once per Idempotency-Key and account.
func (s *shop) createOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SKU == "" || in.Qty < 1 {
		// A deterministic 4xx is an outcome too: stored and replayed.
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "send a sku and a qty of at least 1"})
		return
	}
	acct, _ := accountScope(r)
	s.mu.Lock()
	o := &order{ID: fmt.Sprintf("ord_%d", len(s.orders)+1), SKU: in.SKU, Qty: in.Qty, account: acct}
	s.orders[o.ID] = o
	s.mu.Unlock()

	// The derived key is the same on every retry of this request and
	// differs between accounts, so the warehouse ships once even if our
	// stored outcome were lost.
	shipment, err := s.warehouse.fulfil(r.Context(), httpmw.DerivedKey(r.Context(), "fulfil"), o.ID, o.Qty)
	if err != nil {
		http.Error(w, "warehouse unavailable", http.StatusBadGateway) // 5xx: not stored, the retry runs again
		return
	}
	s.mu.Lock()
	o.Shipment = shipment
	s.mu.Unlock()
	w.Header().Set("Location", "/v1/orders/"+o.ID) // replayed with the response
	writeJSON(w, http.StatusCreated, o)
}

// getOrder needs no idempotency key: reading twice changes nothing.
func (s *shop) getOrder(w http.ResponseWriter, r *http.Request) {
	acct, _ := accountScope(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[r.PathValue("id")]
	if !ok || o.account != acct {
		http.Error(w, "no such order", http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newAPI returns the routes, behind the app's authentication.
func newAPI(store *redisstore.Store, s *shop) http.Handler {
	idem := httpmw.New(store, httpmw.Options{Scope: accountScope})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idem(http.HandlerFunc(s.createOrder)))
	mux.HandleFunc("GET /v1/orders/{id}", s.getOrder)
	return authenticate(apiKeys, mux)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8082", "listen address (keep it on loopback)")
	redisURL := flag.String("redis", "", "Redis URL (default $REDIS_URL, else an embedded miniredis)")
	self := flag.Bool("selftest", false, "send requests to the server, print what happened, and exit")
	flag.Parse()

	client, where, closeRedis, err := devredis.Open(devredis.URL(*redisURL)) // $REDIS_URL read after parsing: -h prints defaults
	if err != nil {
		log.Fatal(err)
	}
	defer closeRedis()
	log.Printf("redis: %s", where)
	// RequireNoEviction: on a Redis that may evict records, requests get
	// 503 instead of being served without the guarantee.
	store, err := redisstore.New(client, redisstore.Options{Prefix: "idem:nethttp:", RequireNoEviction: true})
	if err != nil {
		log.Fatal(err)
	}
	s := newShop(newWarehouse(50 * time.Millisecond))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: newAPI(store, s), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	if *self {
		if err := selftest(context.Background(), base, s.warehouse, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	fmt.Printf("serving on %s; try:\n\n"+
		"curl -i %s/v1/orders -H 'Authorization: Bearer sk_test_alice' -H 'Idempotency-Key: order-1' \\\n"+
		"  -H 'Content-Type: application/json' -d '{\"sku\":\"book\",\"qty\":1}'\n", base, base)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
}
