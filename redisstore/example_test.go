package redisstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore"
)

// The Claim, Complete and replay cycle by hand. An embedded miniredis stands
// in for Redis here; use redis.NewClient, NewClusterClient or
// NewFailoverClient in production.
func ExampleStore_Claim() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	req := redisstore.Request{Scope: "acct_42", Key: "order-7", Fingerprint: "sha256-of-the-order"}
	for attempt := 1; attempt <= 2; attempt++ {
		c, err := store.Claim(ctx, req)
		switch {
		case errors.Is(err, redisstore.ErrInProgress):
			fmt.Println("in progress: retry later")
			continue
		case errors.Is(err, redisstore.ErrMismatch):
			fmt.Println("key reused for another request")
			continue
		case err != nil:
			panic(err) // Redis unreachable: fail closed
		}
		if c.Status == redisstore.Replayed {
			fmt.Printf("attempt %d: replayed %d %s\n", attempt, c.Response.Code, c.Response.Body)
			continue
		}
		// Run the side effect once, then record its outcome.
		body := []byte(`{"order":"ord_1"}`)
		if err := c.Lease.Complete(ctx, redisstore.Response{Code: 201, Body: body}); err != nil {
			panic(err)
		}
		fmt.Printf("attempt %d: %s, created %s\n", attempt, c.Status, body)
	}

	_, err = store.Claim(ctx, redisstore.Request{Scope: "acct_42", Key: "order-7", Fingerprint: "another order"})
	fmt.Println(err)
	// Output:
	// attempt 1: claimed, created {"order":"ord_1"}
	// attempt 2: replayed 201 {"order":"ord_1"}
	// redisstore: key reused with a different fingerprint
}

// Do protects a side effect that is not an HTTP handler: here, a queue
// consumer sending an email once per message, however often the message is
// delivered.
func ExampleStore_Do() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		panic(err)
	}

	sent := 0
	sendWelcome := func(ctx context.Context, l *redisstore.Lease) ([]byte, error) {
		// l.DerivedKey("email") is the key to hand a provider that dedupes.
		sent++
		return []byte("msg_1"), nil
	}
	ctx := context.Background()
	for delivery := 1; delivery <= 3; delivery++ {
		res, err := store.Do(ctx, redisstore.Request{Scope: "mailer", Key: "event-123"}, sendWelcome)
		if err != nil {
			panic(err)
		}
		fmt.Printf("delivery %d: %s (replayed %t)\n", delivery, res.Data, res.Replayed)
	}
	fmt.Println("emails sent:", sent)
	// Output:
	// delivery 1: msg_1 (replayed false)
	// delivery 2: msg_1 (replayed true)
	// delivery 3: msg_1 (replayed true)
	// emails sent: 1
}

// Marking an error transient releases the key, so the next delivery tries
// again; any other error is the operation's final outcome.
func ExampleTransient() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	store, _ := redisstore.New(client, redisstore.Options{})

	calls := 0
	charge := func(ctx context.Context, l *redisstore.Lease) ([]byte, error) {
		calls++
		if calls == 1 {
			return nil, redisstore.Transient(errors.New("provider timed out before charging"))
		}
		return []byte("ch_1"), nil
	}
	req := redisstore.Request{Key: "invoice-9"}
	_, err := store.Do(context.Background(), req, charge)
	fmt.Println("first:", err)
	res, _ := store.Do(context.Background(), req, charge)
	fmt.Println("second:", string(res.Data))
	// Output:
	// first: provider timed out before charging
	// second: ch_1
}
