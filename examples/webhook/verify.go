package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// tolerance is how far a delivery's webhook-timestamp may be from now. It
// bounds how long a captured delivery can be replayed by an attacker;
// senders sign every retry afresh.
const tolerance = 5 * time.Minute

// sign returns the webhook-signature value for a delivery: "v1," and the
// base64 HMAC-SHA256 of "id.timestamp.body" under secret.
//
// This is a simplified Standard Webhooks scheme: the real one decodes the
// secret from its "whsec_" base64 form, and a production receiver should use
// the sender's SDK or the standardwebhooks library.
func sign(secret []byte, id, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id + "." + timestamp + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// checkSignature verifies a delivery's headers and body against secret at now.
func checkSignature(secret []byte, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("malformed webhook-timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook-timestamp too far from now")
	}
	want := []byte(sign(secret, id, ts, body))
	for _, s := range strings.Fields(sigs) { // several during secret rotation
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return errors.New("no valid signature")
}

// verify admits only deliveries signed with the secret of the path's
// {sender}, before anything touches Redis: without it, anyone could fill
// the sender's scope with event IDs, and its real events would be ignored as
// replays.
func verify(secrets map[string][]byte, now func() time.Time, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, ok := secrets[r.PathValue("sender")]
		if !ok {
			http.Error(w, "unknown sender", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body unreadable or too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := checkSignature(secret, r.Header, body, now()); err != nil {
			http.Error(w, "signature: "+err.Error(), http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
