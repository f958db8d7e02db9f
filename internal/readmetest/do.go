package readmetest

import (
	"context"
	"errors"

	"github.com/idemkey/idemkey/redisstore"
)

// README:begin do
func handle(ctx context.Context, store *redisstore.Store, msg message) {
	res, err := store.Do(ctx, redisstore.Request{Scope: "mailer", Key: msg.ID, Fingerprint: hash(msg)},
		func(ctx context.Context, l *redisstore.Lease) ([]byte, error) {
			id, err := mailer.Send(ctx, msg, l.DerivedKey("send"))
			if isTemporary(err) {
				return nil, redisstore.Transient(err) // nothing sent: the key is released
			}
			return []byte(id), err // a result or a final failure: stored for every duplicate
		})
	switch {
	case err == nil: // res.Data; res.Replayed says whether it ran now
		ack(msg, res)
	case errors.Is(err, redisstore.ErrInProgress): // another consumer runs it: requeue with a delay
		requeue(msg)
	case errors.Is(err, redisstore.ErrFailed), errors.Is(err, redisstore.ErrMismatch),
		errors.Is(err, redisstore.ErrInvalidRequest), errors.Is(err, redisstore.ErrExpired):
		deadLetter(msg, err) // failed for good, ID reused for another message, bad ID, or ran long ago
	default: // Redis unreachable, or a transient failure (the function's, or its context's end)
		requeue(msg)
	}
}

// README:end
