package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// webhookSender plays the sending service: it signs each delivery and
// posts it to url.
type webhookSender struct {
	url    string
	secret []byte
}

// result is what a delivery got back.
type result struct {
	Status   int
	Replayed bool // Idempotent-Replayed: true
	Body     string
}

func (r result) String() string {
	s := strconv.Itoa(r.Status)
	if r.Replayed {
		s += " replayed"
	}
	return s + " " + r.Body
}

// deliver sends one signed delivery of the event id with body.
func (s *webhookSender) deliver(ctx context.Context, id, body string) (result, error) {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Id", id)
	req.Header.Set("Webhook-Timestamp", ts)
	req.Header.Set("Webhook-Signature", sign(s.secret, id, ts, []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(bytes.TrimSpace(b))}, err
}

func paymentEvent(order string, amount int) string {
	return fmt.Sprintf(`{"type":"payment.succeeded","data":{"order_id":%q,"amount":%d}}`, order, amount)
}

// selftest sends deliveries through s, prints what each got, and returns an
// error if any answer or o's state is not what the receiver promises.
func selftest(ctx context.Context, s *webhookSender, o *orders, out io.Writer) error {
	var wrong []string
	expect := func(ok bool, format string, args ...any) {
		if !ok {
			wrong = append(wrong, fmt.Sprintf(format, args...))
		}
	}
	run := strings.ToLower(rand.Text()[:8]) // fresh event IDs: a real Redis keeps records for days
	send := func(label, id, body string) result {
		r, err := s.deliver(ctx, id, body)
		expect(err == nil, "%s: %v", label, err)
		fmt.Fprintf(out, "   %-13s %v\n", label+":", r)
		return r
	}

	id, order := "msg_"+run+"a", "ord_"+run+"a"
	fmt.Fprintf(out, "1. redelivery storm: %s (pays %s) sent 5 times at once, then once more later\n", id, order)
	var wg sync.WaitGroup
	storm := make([]result, 5)
	for i := range storm {
		wg.Go(func() { storm[i], _ = s.deliver(ctx, id, paymentEvent(order, 4200)) })
	}
	wg.Wait()
	fresh := 0
	for i, r := range storm {
		fmt.Fprintf(out, "   %-13s %v\n", fmt.Sprintf("delivery %d:", i+1), r)
		expect(r.Status == http.StatusOK && r.Body == storm[0].Body, "storm delivery %d: %v", i+1, r)
		if !r.Replayed {
			fresh++
		}
	}
	expect(fresh == 1, "storm: %d deliveries applied, want 1", fresh)
	r := send("later", id, paymentEvent(order, 4200))
	expect(r.Status == http.StatusOK && r.Replayed, "later redelivery: %v", r)
	fmt.Fprintf(out, "   order %s: payment applied %d time(s)\n", order, o.appliedTo(order))
	expect(o.appliedTo(order) == 1, "order %s applied %d times", order, o.appliedTo(order))

	id, order = "msg_"+run+"b", "ord_"+run+"b"
	fmt.Fprintf(out, "2. failing delivery: %s (pays %s), the database is down the first time\n", id, order)
	o.failNext(order, 1)
	r = send("attempt 1", id, paymentEvent(order, 990))
	expect(r.Status == http.StatusInternalServerError, "failing attempt: %v", r)
	r = send("retry", id, paymentEvent(order, 990)) // a real sender backs off first
	expect(r.Status == http.StatusOK && !r.Replayed, "retry after 500: %v", r)
	r = send("retry again", id, paymentEvent(order, 990))
	expect(r.Status == http.StatusOK && r.Replayed, "retry after 200: %v", r)
	fmt.Fprintf(out, "   order %s: payment applied %d time(s)\n", order, o.appliedTo(order))
	expect(o.appliedTo(order) == 1, "order %s applied %d times", order, o.appliedTo(order))

	fmt.Fprintln(out, "3. forged delivery, signed with the wrong secret: rejected before Redis")
	forger := &webhookSender{url: s.url, secret: []byte("guessed")}
	r, err := forger.deliver(ctx, "msg_"+run+"c", paymentEvent("ord_"+run+"c", 1))
	expect(err == nil && r.Status == http.StatusUnauthorized, "forged delivery: %v %v", r, err)
	fmt.Fprintf(out, "   %-13s %v\n", "forged:", r)

	if wrong != nil {
		return errors.New("selftest: " + strings.Join(wrong, "; "))
	}
	fmt.Fprintln(out, "ok: every event applied once")
	return nil
}

// curlCommand returns a curl command line that delivers a signed event to
// url, valid for the signature tolerance.
func curlCommand(url string, secret []byte) string {
	id, ts, body := "msg_curl_"+strings.ToLower(rand.Text()[:6]), strconv.FormatInt(time.Now().Unix(), 10), paymentEvent("ord_curl", 1500)
	return fmt.Sprintf("curl -i %s \\\n  -H 'Content-Type: application/json' \\\n  -H 'webhook-id: %s' -H 'webhook-timestamp: %s' \\\n  -H 'webhook-signature: %s' \\\n  -d '%s'",
		url, id, ts, sign(secret, id, ts, []byte(body)), body)
}
