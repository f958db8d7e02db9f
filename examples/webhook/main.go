// Command webhook is a webhook receiver that applies each event once,
// however often the sender delivers it: the "message or webhook consumer"
// row of the idempotency guide, with the sender's event ID as the key.
//
// Senders deliver at least once: they retry on timeouts, on 5xx and on
// anything they could not read, sometimes while the first delivery is still
// running. Standard Webhooks (standardwebhooks.com) senders put the event ID
// in the webhook-id header, unchanged on every retry, and sign each delivery.
// The receiver:
//
//  1. verifies the signature first (verify.go), so a forged or stale delivery
//     is rejected with 401 and never reaches Redis;
//  2. runs httpmw with Header "Webhook-Id" and the sender as Scope, so event
//     IDs of different senders never collide;
//  3. applies the event in its handler: marks an order paid.
//
// A redelivery of an applied event gets the stored 200 (Idempotent-Replayed:
// true) and the order is not touched again; a delivery that overlaps a running
// one waits for it (Options.Wait) and gets its answer. A 500 is not stored: the
// key is released and the sender's retry applies the event.
//
//	go run ./examples/webhook -selftest    # send signed deliveries to itself, print, exit
//	go run ./examples/webhook              # serve on 127.0.0.1:8081 and print a curl command
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/examples/internal/devredis"
	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// event is the payload of a delivery.
type event struct {
	Type string `json:"type"`
	Data struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount"`
	} `json:"data"`
}

// orders is the application's state: which orders are paid. It is safe for
// concurrent use.
type orders struct {
	work time.Duration // how long applying an event takes

	mu      sync.Mutex
	applied map[string]int // order ID -> times the payment was applied; 1 is right
	failing map[string]int // order ID -> deliveries that fail with 500 first
}

func newOrders(work time.Duration) *orders {
	return &orders{work: work, applied: map[string]int{}, failing: map[string]int{}}
}

// handle applies a payment event. It runs once per event ID and sender.
func (o *orders) handle(w http.ResponseWriter, r *http.Request) {
	var ev event
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil || ev.Data.OrderID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "malformed event"}) // stored: a retry cannot fix it
		return
	}
	if ev.Type != "payment.succeeded" {
		writeJSON(w, http.StatusOK, map[string]string{"ignored": ev.Type})
		return
	}
	select { // the database write
	case <-time.After(o.work):
	case <-r.Context().Done():
		http.Error(w, "cancelled", http.StatusServiceUnavailable) // 5xx: not stored, the key is released
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing[ev.Data.OrderID] > 0 {
		o.failing[ev.Data.OrderID]--
		http.Error(w, "database unavailable", http.StatusInternalServerError) // not stored: the sender retries
		return
	}
	o.applied[ev.Data.OrderID]++
	writeJSON(w, http.StatusOK, map[string]any{"order_id": ev.Data.OrderID, "status": "paid", "amount": ev.Data.Amount})
}

func (o *orders) appliedTo(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.applied[id]
}

func (o *orders) failNext(id string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failing[id] = n
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newStore returns the store the receiver uses: records outlive the sender's
// retry horizon (Standard Webhooks senders retry for over a day), or a late
// retry would apply the event again.
func newStore(client redis.Scripter) (*redisstore.Store, error) {
	// RequireNoEviction: an evicted record would apply its event again, so
	// refuse to serve on a Redis that may evict (503; the sender retries).
	return redisstore.New(client, redisstore.Options{Prefix: "idem:webhook:", Retention: 72 * time.Hour, RequireNoEviction: true})
}

// newReceiver routes POST /webhooks/{sender}: signature check, then the
// idempotency middleware keyed by webhook-id in the sender's scope, then o.
func newReceiver(store *redisstore.Store, secrets map[string][]byte, o *orders) http.Handler {
	idem := httpmw.New(store, httpmw.Options{
		Header: "Webhook-Id",
		// The sender, from the path; verify has checked the delivery is
		// signed with that sender's secret, so no one else can use its scope.
		Scope: func(r *http.Request) (string, error) { return "sender:" + r.PathValue("sender"), nil },
		// A redelivery that overlaps a running one waits for its answer
		// instead of getting 409, which the sender would retry later.
		Wait: 5 * time.Second,
	})
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/{sender}", verify(secrets, time.Now, idem(http.HandlerFunc(o.handle))))
	return mux
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address (keep it on loopback)")
	redisURL := flag.String("redis", "", "Redis URL (default $REDIS_URL, else an embedded miniredis)")
	self := flag.Bool("selftest", false, "send signed deliveries to the receiver, print what happened, and exit")
	flag.Parse()

	client, where, closeRedis, err := devredis.Open(devredis.URL(*redisURL)) // $REDIS_URL read after parsing: -h prints defaults
	if err != nil {
		log.Fatal(err)
	}
	defer closeRedis()
	log.Printf("redis: %s", where)
	store, err := newStore(client)
	if err != nil {
		log.Fatal(err)
	}
	const sender = "acme-payments"
	secret := []byte("whsec-demo-acme") // one shared secret per configured sender
	o := newOrders(50 * time.Millisecond)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: newReceiver(store, map[string][]byte{sender: secret}, o), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/webhooks/" + sender

	if *self {
		if err := selftest(context.Background(), &webhookSender{url: url, secret: secret}, o, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	fmt.Printf("receiving webhooks on %s; try (signature valid for 5 minutes):\n\n%s\n", url, curlCommand(url, secret))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
}
