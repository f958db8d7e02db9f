package payments

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors the simulated provider answers with.
var (
	// ErrDeclined means the provider refused the charge; nothing was charged.
	// It is a final answer: charging again with the same details is declined
	// again.
	ErrDeclined = errors.New("payments: card declined")

	// ErrProviderUnavailable means the provider could not be reached or
	// failed before charging: nothing was charged, and the caller may retry
	// with the same idempotency key.
	ErrProviderUnavailable = errors.New("payments: provider unavailable")

	// ErrProviderKeyReused means the provider already holds a charge under
	// the idempotency key, for another amount or currency. A provider
	// rejects that rather than guess; with keys from DerivedKey it cannot
	// happen, since the middleware has already matched the request's
	// fingerprint.
	ErrProviderKeyReused = errors.New("payments: provider idempotency key reused with other parameters")
)

// DeclinedCustomer is the customer whose cards the simulated provider always
// declines, to show that a deterministic failure is stored and replayed.
const DeclinedCustomer = "cus_declined"

// ChargeRequest is one call to the provider.
type ChargeRequest struct {
	// IdempotencyKey is the key the provider dedupes on, across all of its
	// callers: a retry with the same key gets the first charge back.
	// Required.
	IdempotencyKey string
	// Amount is in minor units (cents).
	Amount int64
	// Currency is an ISO 4217 code.
	Currency string
	// Customer is charged.
	Customer string
	// SimulateOutage makes the call fail with ErrProviderUnavailable before
	// anything is charged, for fault drills.
	SimulateOutage bool
}

// Charge is a charge the provider made.
type Charge struct {
	// ID is the provider's charge ID.
	ID string `json:"id"`
	// Amount is in minor units.
	Amount int64 `json:"amount"`
	// Currency is an ISO 4217 code.
	Currency string `json:"currency"`
}

// Provider is a stand-in for an external payment provider (Stripe, Adyen).
// Like a real one, it charges at most once per idempotency key: it keeps a
// dedupe record per key, scoped by our merchant account and not by our
// callers, so the key we hand it must already be unique per caller (see
// ginmw.DerivedKey). Its state lives in Redis, so it survives a crash of the
// API that calls it. A Provider is safe for concurrent use.
type Provider struct {
	rdb     redis.Scripter
	prefix  string
	latency time.Duration
	ttl     time.Duration
}

// chargeScript creates the charge for an idempotency key once, or returns
// the one it created before. Its keys share the {provider} hash tag.
var chargeScript = redis.NewScript(`
-- KEYS[1]=dedupe record KEYS[2]=charges counter KEYS[3]=deduplicated counter
-- ARGV[1]=new charge ID ARGV[2]=amount ARGV[3]=currency ARGV[4]=record TTL (ms)
-- => {0|1 (1: deduplicated), id, amount, currency}
local rec = redis.call('HMGET', KEYS[1], 'id', 'amount', 'currency')
if rec[1] then
  redis.call('INCR', KEYS[3])
  return {1, rec[1], rec[2], rec[3]}
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'amount', ARGV[2], 'currency', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('INCR', KEYS[2])
return {0, ARGV[1], ARGV[2], ARGV[3]}
`)

// Charge charges the customer once per req.IdempotencyKey: a repeated call
// with the key returns the first charge and changes nothing (it only counts
// as deduplicated in Stats). Each call takes the provider's latency, or
// until ctx ends. It returns ErrDeclined for DeclinedCustomer,
// ErrProviderUnavailable on a simulated outage, a cancelled ctx or a Redis
// failure (the charge may then have been made: retry with the same key to
// find out), and ErrProviderKeyReused when the key was used for other
// parameters.
func (p *Provider) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	if req.IdempotencyKey == "" {
		return Charge{}, errors.New("payments: charge without an idempotency key")
	}
	if err := sleep(ctx, p.latency); err != nil {
		return Charge{}, fmt.Errorf("%w: %v", ErrProviderUnavailable, err)
	}
	if req.SimulateOutage {
		return Charge{}, fmt.Errorf("%w: simulated outage", ErrProviderUnavailable)
	}
	if req.Customer == DeclinedCustomer {
		return Charge{}, ErrDeclined
	}
	keys := []string{
		p.prefix + "{provider}:charge:" + req.IdempotencyKey,
		p.prefix + "{provider}:charges",
		p.prefix + "{provider}:deduplicated",
	}
	reply, err := chargeScript.Run(ctx, p.rdb, keys,
		"ch_"+randomHex(12), req.Amount, req.Currency, p.ttl.Milliseconds()).Slice()
	if err != nil {
		return Charge{}, fmt.Errorf("%w: %v", ErrProviderUnavailable, err)
	}
	ch, err := decodeCharge(reply)
	if err != nil {
		return Charge{}, err
	}
	if ch.Amount != req.Amount || ch.Currency != req.Currency {
		return Charge{}, ErrProviderKeyReused
	}
	return ch, nil
}

func decodeCharge(reply []any) (Charge, error) {
	if len(reply) != 4 {
		return Charge{}, fmt.Errorf("payments: unexpected provider reply %v", reply)
	}
	id, _ := reply[1].(string)
	amount, _ := reply[2].(string)
	currency, _ := reply[3].(string)
	n, err := strconv.ParseInt(amount, 10, 64)
	if id == "" || err != nil {
		return Charge{}, fmt.Errorf("payments: unexpected provider reply %v", reply)
	}
	return Charge{ID: id, Amount: n, Currency: currency}, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on supported platforms
	return hex.EncodeToString(b)
}
