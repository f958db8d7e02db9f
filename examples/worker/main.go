// Command worker shows Store.Do protecting an external API call made by a
// queue consumer: no HTTP, just an at-least-once queue that delivers every
// message two or three times, to three concurrent consumers.
//
// Each message asks for one email. The consumers dedupe by message ID with
// redisstore.Store.Do and hand the email API a derived idempotency key, so
// every email goes out exactly once however often its message arrives:
//
//   - a duplicate of a message already handled gets the stored outcome: ack;
//   - a duplicate of a message being handled right now gets ErrInProgress:
//     nack, and it comes back a little later to find the outcome stored;
//   - a 5xx from the API is marked redisstore.Transient: the key is released
//     and the redelivery sends the email;
//   - a 4xx from the API (invalid recipient) is final: it is stored, and every
//     duplicate gets it back as a *redisstore.FailedError: ack (dead-letter).
//
// Run it with no Redis at all (an embedded miniredis), or against a real one:
//
//	go run ./examples/worker
//	go run ./examples/worker -redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/idemkey/idemkey/examples/internal/devredis"
	"github.com/idemkey/idemkey/redisstore"
)

// message is one queued request to send an email.
type message struct{ ID, To, Text string }

// outcome is what a consumer made of one delivery.
type outcome int

const (
	sent           outcome = iota // this delivery sent the email: ack
	replayed                      // a duplicate; the email was sent before: ack
	inProgress                    // a duplicate of a delivery being handled: nack
	transient                     // the API failed, nothing sent, key released: nack
	failed                        // this delivery ran it and it failed for good: ack, dead-letter
	failedReplayed                // a duplicate of a message that failed for good: ack
	mismatch                      // same ID, another payload (a producer bug): ack, dead-letter
	unavailable                   // Redis unreachable or outcome not stored: nack
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"sent", "replayed", "in progress", "transient", "failed", "failed (replayed)", "mismatch", "unavailable"}

func (o outcome) String() string { return outcomeNames[o] }

// ack reports whether the queue may forget the delivery.
func (o outcome) ack() bool { return o != inProgress && o != transient && o != unavailable }

// consumer handles deliveries with send, once per message ID. It is safe for
// concurrent use.
type consumer struct {
	store *redisstore.Store
	send  func(ctx context.Context, idempotencyKey string, m message) (emailID string, err error)
}

// handle processes one delivery of m.
func (c *consumer) handle(ctx context.Context, m message) (outcome, string) {
	req := redisstore.Request{
		Scope: "email-sender", // the consumer group: message IDs are unique within it
		Key:   m.ID,           // the producer's ID, the same on every redelivery
		// A reused ID with another payload is ErrMismatch, not a silent replay.
		Fingerprint: fingerprintOf(m),
	}
	res, err := c.store.Do(ctx, req, func(ctx context.Context, l *redisstore.Lease) ([]byte, error) {
		// The derived key is the same on every attempt at this message, so
		// the API would not send twice even if our record were lost.
		id, err := c.send(ctx, l.DerivedKey("send"), m)
		if e := (*apiError)(nil); errors.As(err, &e) && e.Code >= 500 {
			return nil, redisstore.Transient(err) // nothing was sent: release the key
		}
		return []byte(id), err // any other error is the final outcome: stored
	})
	var failure *redisstore.FailedError
	switch {
	case err == nil && res.Replayed:
		return replayed, string(res.Data)
	case err == nil:
		return sent, string(res.Data)
	case errors.Is(err, redisstore.ErrInProgress):
		return inProgress, ""
	case redisstore.IsTransient(err):
		return transient, err.Error()
	case errors.As(err, &failure) && failure.Err != nil: // this delivery ran it: Do stored the failure as final
		return failed, err.Error()
	case errors.As(err, &failure): // a duplicate of a message that failed for good
		return failedReplayed, err.Error()
	case errors.Is(err, redisstore.ErrMismatch):
		return mismatch, err.Error()
	default:
		// Redis is unreachable, or the email went out but its outcome could
		// not be stored: retry later. A retry after the lease runs out takes
		// the record over and calls the API again with the same derived key.
		return unavailable, err.Error()
	}
}

// fingerprintOf hashes what m asks for.
func fingerprintOf(m message) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(m.To+"\x00"+m.Text)))
}

// consume runs n consumers on an in-memory at-least-once queue holding
// deliveries, until every delivery is acked. A nacked delivery comes back
// after a short delay; after maxDeliveries in all, the rest are dropped.
func consume(ctx context.Context, c *consumer, deliveries []message, n int, log io.Writer) (counts [numOutcomes]int) {
	const retryDelay, maxDeliveries = 20 * time.Millisecond, 500
	ready := make(chan message, len(deliveries)) // room for every open delivery: sends never block
	for _, m := range deliveries {
		ready <- m
	}
	var mu sync.Mutex
	open, total := len(deliveries), 0
	var wg sync.WaitGroup
	for id := 1; id <= n; id++ {
		wg.Go(func() {
			for m := range ready {
				o, detail := c.handle(ctx, m)
				verdict := "nack"
				if o.ack() {
					verdict = "ack"
				}
				fmt.Fprintf(log, "consumer %d  %s  %-4s  %-17s %s\n", id, m.ID, verdict, o, detail)
				mu.Lock()
				counts[o]++
				total++
				if o.ack() || total >= maxDeliveries {
					if open--; open == 0 {
						close(ready)
					}
				} else {
					time.AfterFunc(retryDelay, func() { ready <- m })
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return counts
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default $REDIS_URL, else an embedded miniredis)")
	flag.Parse()
	client, where, closeRedis, err := devredis.Open(devredis.URL(*redisURL)) // $REDIS_URL read after parsing: -h prints defaults
	if err != nil {
		log.Fatal(err)
	}
	defer closeRedis()
	log.Printf("redis: %s", where)
	// RequireNoEviction: on a Redis that may evict records, jobs fail
	// (ErrEvicting) instead of running without the guarantee.
	store, err := redisstore.New(client, redisstore.Options{Lease: 5 * time.Second, RequireNoEviction: true})
	if err != nil {
		log.Fatal(err)
	}

	run := rand.Text()[:6] // fresh IDs per run: in a real Redis the records outlive the run
	msgs := []message{
		{run + "-1", "alice@example.com", "Your order has shipped"},
		{run + "-2", "bob@example.com", "Your password was changed"},
		{run + "-3", "carol@example.com", "Your invoice is ready"}, // the API answers 503 the first time
		{run + "-4", "not-an-address", "Welcome!"},                 // the API rejects it for good
		{run + "-5", "dave@example.com", "Your order has shipped"},
	}
	var deliveries []message // each message two or three times, duplicates side by side
	for i, m := range msgs {
		for range 2 + i%2 {
			deliveries = append(deliveries, m)
		}
	}
	api := newEmailAPI(30*time.Millisecond, msgs[2].ID)
	counts := consume(context.Background(), &consumer{store: store, send: api.send}, deliveries, 3, os.Stdout)

	total := 0
	for _, c := range counts {
		total += c
	}
	fmt.Printf("\nmessages %d, deliveries %d (%d duplicates queued, %d redeliveries after a nack)\n",
		len(msgs), total, len(deliveries)-len(msgs), total-len(deliveries))
	fmt.Printf("email API: %d calls, %d emails sent\n", api.calls(), api.sentCount())
	for o, c := range counts {
		if c > 0 {
			fmt.Printf("  %-17s %d\n", outcome(o), c)
		}
	}
	for _, m := range msgs {
		fmt.Printf("  %s  %-18s API calls %d, emails sent %d\n", m.ID, m.To, api.callsFor(m.ID), api.sentFor(m.ID))
	}
}
