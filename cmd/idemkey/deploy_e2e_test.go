package main

// The deploy drill: what production does to a running request.
// Three "idemkey serve" instances on one redis-server behind a round-robin
// client; a storm of keys whose clients give up after a short attempt
// timeout and retry with the same key; and, while it runs, a rolling
// restart: SIGTERM each instance in turn, wait for its graceful stop, start
// it again. The provider's counters in Redis say whether any key was
// charged twice; every key must end with one final answer, the same on
// every try and on a late probe.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/internal/redistest"
)

// drill is the drill's shape: small enough for 2 busy cores under -race,
// with every request at risk of a restart.
const (
	drillLatency   = 120 * time.Millisecond // the provider's, per charge: longer than an attempt
	drillAttempt   = 100 * time.Millisecond // a client gives up on an attempt after this
	drillGrace     = 50 * time.Millisecond  // --shutdown-grace: shorter than a run, so restarts cut runs off
	drillArrival   = 10 * time.Millisecond  // a new key every
	drillMinKeys   = 400
	drillRounds    = 2                // restarts of each of the 3 instances
	drillKeyBudget = 30 * time.Second // a key without a final answer by then fails the drill
)

// TestDeployDrill runs the drill with the store on the auto-pipeliner
// (serve's default) and without it.
func TestDeployDrill(t *testing.T) {
	redistest.Long(t)
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"pipelined", nil}, {"unbatched", []string{"--no-pipeline"}}} {
		t.Run(mode.name, func(t *testing.T) { deployDrill(t, mode.flags) })
	}
}

// drillKey is what one key's client saw.
type drillKey struct {
	key, body string
	attempts  int
	finals    map[string]bool // distinct bodies of its 201 answers
	final     string          // the first 201 body
	statuses  map[string]int  // by status (or "error")
	failure   string          // an answer that must never come
}

// lb is the round-robin client's view of the instances.
type lb struct {
	mu   sync.Mutex
	urls []string
	next int
}

func (b *lb) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return b.urls[b.next%len(b.urls)]
}

func (b *lb) set(i int, url string) {
	b.mu.Lock()
	b.urls[i] = url
	b.mu.Unlock()
}

func deployDrill(t *testing.T, extra []string) {
	gin.SetMode(gin.ReleaseMode) // the counters' API is quiet
	rs := redistest.Start(t)
	flags := append([]string{"--redis", "redis://" + rs.Addr() + "/0", "--lease", "2s",
		"--provider-latency", drillLatency.String(), "--shutdown-grace", drillGrace.String()}, extra...)
	api, err := payments.New(payments.Config{Redis: rs.Client(t)}) // to read the provider's counters
	require.NoError(t, err)

	var procs, current []*server // every instance ever started (for their logs), the running ones
	balancer := &lb{}
	for range 3 {
		s := startServe(t, flags...)
		procs, current = append(procs, s), append(current, s)
		balancer.urls = append(balancer.urls, s.url)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: drillAttempt}

	start := time.Now()
	restarted := make(chan int, 1)
	go func() {
		n := 0
		defer func() { restarted <- n }()
		for range drillRounds {
			for i := range 3 {
				time.Sleep(300 * time.Millisecond) // the storm runs on all three for a moment
				old := current[i]
				_ = old.cmd.Process.Signal(syscall.SIGTERM)
				if code := old.wait(t, 30*time.Second); code != 0 {
					t.Errorf("an instance exited %d on SIGTERM:\n%s", code, old.stderr)
					return
				}
				s := startServe(t, flags...)
				procs, current[i] = append(procs, s), s
				balancer.set(i, s.url)
				n++
			}
		}
	}()

	// The storm: a new key every drillArrival until the restarts are over
	// (and at least drillMinKeys), each retried with the same key until it
	// has a final answer.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		keys     []*drillKey
		restarts = -1
	)
	for i := 0; restarts < 0 || i < drillMinKeys; i++ {
		select {
		case restarts = <-restarted:
		default:
		}
		k := &drillKey{
			key:      fmt.Sprintf("drill-%d-%d", start.UnixNano(), i),
			body:     fmt.Sprintf(`{"amount": %d, "currency": "EUR", "customer": "cus_%d"}`, 100+i, i),
			finals:   map[string]bool{},
			statuses: map[string]int{},
		}
		mu.Lock()
		keys = append(keys, k)
		mu.Unlock()
		wg.Go(func() { k.run(client, balancer) })
		time.Sleep(drillArrival)
	}
	wg.Wait()
	wall := time.Since(start)

	// Every key: one final answer, the same on every try and on a late probe.
	total, statuses := 0, map[string]int{}
	for _, k := range keys {
		require.Empty(t, k.failure, "key %s", k.key)
		require.NotEmpty(t, k.final, "key %s has no final answer after %d attempts: %v", k.key, k.attempts, k.statuses)
		require.Len(t, k.finals, 1, "key %s was answered differently: %v", k.key, k.finals)
		probe, err := post(balancer.pick(), "sk_drill", k.key, k.body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, probe.status, "late probe of %s: %s", k.key, probe.body)
		require.Equal(t, "true", probe.header.Get("Idempotent-Replayed"), "late probe of %s ran again", k.key)
		require.Equal(t, k.final, probe.body)
		total += k.attempts
		for s, n := range k.statuses {
			statuses[s] += n
		}
	}

	// Side effects, counted where the provider keeps them.
	stats, err := api.Stats(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, len(keys), stats.ProviderCharges, "charges for %d keys", len(keys))
	require.EqualValues(t, len(keys), stats.PaymentsCreated, "payments for %d keys", len(keys))

	var cutOff, tookOver int
	for _, p := range procs {
		cutOff += strings.Count(p.stderr.String(), "the run was cut off before it answered")
		tookOver += strings.Count(p.stderr.String(), "took over a key")
	}
	// A drill in which no restart landed mid-run tests nothing: with a
	// run (drillLatency) longer than the grace and a new key every
	// drillArrival, each instance has runs in flight whenever it stops.
	require.Equal(t, 3*drillRounds, restarts, "every planned restart happened")
	require.Positive(t, cutOff, "no restart cut a run off: the drill tested nothing")
	require.Equal(t, cutOff, tookOver, "every run cut off by a restart is taken over by its retry, never run as a fresh attempt")
	t.Logf("deploy drill %v: %d keys, %d restarts, %d charges, %d payments, %d provider calls deduplicated, "+
		"%d requests (%d retries), %d runs cut off, %d takeovers, answers %v, wall %v",
		extra, len(keys), restarts, stats.ProviderCharges, stats.PaymentsCreated, stats.ProviderDeduplicated,
		total, total-len(keys), cutOff, tookOver, statuses, wall.Round(100*time.Millisecond))
}

// run sends k until it gets a final answer (201), retrying with the same
// key after anything else, as a client with a short attempt timeout does.
func (k *drillKey) run(client *http.Client, b *lb) {
	deadline := time.Now().Add(drillKeyBudget)
	backoff := 25 * time.Millisecond
	for time.Now().Before(deadline) {
		k.attempts++
		status, body, problem, replayed, err := k.try(client, b.pick())
		switch {
		case err != nil && os.IsTimeout(err):
			k.statuses["gave up"]++ // the attempt timeout
		case err != nil:
			k.statuses["no connection"]++ // a stopped instance
		case status == http.StatusCreated:
			k.statuses[map[bool]string{false: "201", true: "201 replayed"}[replayed]]++
			k.finals[body] = true
			if k.final == "" {
				k.final = body
			}
			return
		case status == http.StatusConflict || status >= 500:
			k.statuses[fmt.Sprintf("%d %s", status, problem)]++
		default:
			k.failure = fmt.Sprintf("%d: %s", status, body)
			return
		}
		time.Sleep(backoff + rand.N(backoff))
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

func (k *drillKey) try(client *http.Client, url string) (status int, body, problem string, replayed bool, err error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/payments", strings.NewReader(k.body))
	if err != nil {
		return 0, "", "", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_drill")
	req.Header.Set("Idempotency-Key", k.key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", "", false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", "", false, err
	}
	var p struct {
		Type string `json:"type"`
		Code string `json:"code"`
	}
	if json.Unmarshal(b, &p) == nil {
		problem = p.Code
		if i := strings.LastIndexByte(p.Type, '#'); p.Code == "" && i >= 0 {
			problem = p.Type[i+1:]
		}
	}
	return resp.StatusCode, string(b), problem, resp.Header.Get("Idempotent-Replayed") == "true", nil
}
