package peers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	redisstorage "github.com/gofiber/storage/redis/v3"

	"github.com/idemkey/idemkey/internal/loadgen"
	"github.com/idemkey/idemkey/storm"
)

const (
	libraryPath   = "github.com/gofiber/fiber/v3/middleware/idempotency"
	fiberModule   = "github.com/gofiber/fiber/v3"
	storageModule = "github.com/gofiber/storage/redis/v3"
)

// firstBody is the request body of the throughput measurements.
var firstBody = []byte(`{"amount":1250,"currency":"eur"}`)

// Run makes every measurement against the Redis server at host:port and
// returns the figures. Progress lines go to o.Log.
func Run(ctx context.Context, o Options, host string, port int) (*Results, error) {
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "peers: "+format+"\n", args...)
		}
	}
	res := &Results{
		Library:       libraryPath,
		FiberVersion:  moduleVersion(fiberModule),
		StorageModule: storageModule,
		GoVersion:     runtime.Version(),
		GOMAXPROCS:    runtime.GOMAXPROCS(0),
		NumCPU:        runtime.NumCPU(),
		Config: Config{
			Rounds: o.Rounds, DurationS: o.Duration.Seconds(), Concurrency: o.Concurrency,
			ReplayKeys: o.ReplayKeys, Keys: o.Keys, Dups: o.Dups, StormConcurrency: o.StormConcurrency,
		},
		Notes: staticNotes(),
	}
	res.StorageVersion = moduleVersion(storageModule)

	// Every app gets its own storage client, as separate processes would.
	var storages []*redisstorage.Storage
	defer func() {
		for _, s := range storages {
			_ = s.Close()
		}
	}()
	newStorage := func() (st *redisstorage.Storage, err error) {
		defer func() { // redisstorage.New panics when Redis does not answer
			if r := recover(); r != nil {
				err = fmt.Errorf("redis storage: %v", r)
			}
		}()
		st = redisstorage.New(redisstorage.Config{Host: host, Port: port})
		storages = append(storages, st)
		return st, nil
	}
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.close()
		}
	}()
	start := func(cfg appConfig) (*server, error) {
		s, err := startApp(cfg)
		if err == nil {
			servers = append(servers, s)
		}
		return s, err
	}

	idemStorage, err := newStorage()
	if err != nil {
		return nil, err
	}
	res.RedisVersion = redisVersion(ctx, idemStorage)
	bare, err := start(appConfig{})
	if err != nil {
		return nil, err
	}
	idem, err := start(appConfig{storage: idemStorage})
	if err != nil {
		return nil, err
	}

	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	keys := &keyMaker{nonce: binary.BigEndian.Uint32(nonce[:])}
	bareClient := loadgen.NewClient(o.Concurrency)
	idemClient := loadgen.NewClient(o.Concurrency)
	defer bareClient.CloseIdleConnections()
	defer idemClient.CloseIdleConnections()

	measureFirst := func(s *server, client *http.Client, phase uint16, d time.Duration) (*loadgen.Result, error) {
		r, err := loadgen.Run(ctx, loadgen.Config{
			Concurrency: o.Concurrency,
			Duration:    d,
			Client:      client,
			Request: func(worker, seq int) (*http.Request, error) {
				return newPayment(s.url, keys.key(phase, worker, seq))
			},
			Check: expectCreated,
		})
		if r != nil {
			res.LoadErrors += r.Errors
		}
		return r, err
	}

	// Warm up connections, goroutines and Redis pools, unmeasured.
	warm := min(o.Duration/4, 500*time.Millisecond)
	logf("warm-up %s per app", warm)
	if _, err := measureFirst(bare, bareClient, 0, warm); err != nil {
		return nil, err
	}
	if _, err := measureFirst(idem, idemClient, 0, warm); err != nil {
		return nil, err
	}

	// Pre-populate the replay keys through the middleware.
	replayKeys := make([]string, o.ReplayKeys)
	for i := range replayKeys {
		replayKeys[i] = keys.key(0xffff, 0, i)
	}
	var next atomic.Int64
	pop, err := loadgen.Run(ctx, loadgen.Config{
		Concurrency: min(o.Concurrency, o.ReplayKeys),
		MaxRequests: o.ReplayKeys,
		Client:      idemClient,
		Request: func(int, int) (*http.Request, error) {
			// MaxRequests bounds the calls, so each index is used once.
			i := int(next.Add(1) - 1)
			return newPayment(idem.url, replayKeys[i])
		},
		Check: expectCreated,
	})
	if err != nil {
		return nil, err
	}
	if pop.Errors > 0 {
		return nil, fmt.Errorf("populating replay keys: %d errors (first: %v)", pop.Errors, pop.FirstError)
	}
	logf("populated %d replay keys", o.ReplayKeys)

	for r := range o.Rounds {
		var rd Round
		var bareRes, idemRes *loadgen.Result
		rd.BareFirst = r%2 == 0
		order := []bool{true, false} // true: bare
		if !rd.BareFirst {
			order = []bool{false, true}
		}
		for _, isBare := range order {
			phase := uint16(2*r + 1)
			if isBare {
				bareRes, err = measureFirst(bare, bareClient, phase, o.Duration)
			} else {
				idemRes, err = measureFirst(idem, idemClient, phase+1, o.Duration)
			}
			if err != nil {
				return nil, err
			}
		}
		before := payments.Load()
		rep, err := loadgen.Run(ctx, loadgen.Config{
			Concurrency: o.Concurrency,
			Duration:    o.Duration,
			Client:      idemClient,
			Request: func(worker, seq int) (*http.Request, error) {
				return newPayment(idem.url, replayKeys[(seq*o.Concurrency+worker)%len(replayKeys)])
			},
			Check: expectCreated,
		})
		if err != nil {
			return nil, err
		}
		res.LoadErrors += rep.Errors
		res.ReplayExecutions += payments.Load() - before

		rd.FirstRPSBare, rd.FirstRPSIdem = round1(bareRes.RPS), round1(idemRes.RPS)
		if bareRes.RPS > 0 {
			rd.Ratio = round3(idemRes.RPS / bareRes.RPS)
		}
		rd.FirstP50MSBare, rd.FirstP99MSBare = ms(bareRes.P50), ms(bareRes.P99)
		rd.FirstP50MSIdem, rd.FirstP99MSIdem = ms(idemRes.P50), ms(idemRes.P99)
		rd.ReplayRPS, rd.ReplayP50MS, rd.ReplayP99MS = round1(rep.RPS), ms(rep.P50), ms(rep.P99)
		res.Rounds = append(res.Rounds, rd)
		logf("round %d/%d: first bare %.0f req/s, first idem %.0f req/s (ratio %.3f), replay %.0f req/s",
			r+1, o.Rounds, bareRes.RPS, idemRes.RPS, rd.Ratio, rep.RPS)
	}
	res.FirstRPSBareMedian = round1(median(res.Rounds, func(r Round) float64 { return r.FirstRPSBare }))
	res.FirstRPSIdemMedian = round1(median(res.Rounds, func(r Round) float64 { return r.FirstRPSIdem }))
	res.FirstOverheadRatioMedian = round3(median(res.Rounds, func(r Round) float64 { return r.Ratio }))
	res.ReplayRPS = round1(median(res.Rounds, func(r Round) float64 { return r.ReplayRPS }))
	if res.ReplayExecutions > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf(
			"%d handler executions happened during the replay measurements (expected 0)", res.ReplayExecutions))
	}
	if res.LoadErrors > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf(
			"%d requests failed during the throughput measurements; the figures are suspect", res.LoadErrors))
	}

	// Retry storm against one instance.
	counter := loadgen.NewExecCounter()
	s1, err := start(appConfig{storage: idemStorage, counter: counter, markReplays: true})
	if err != nil {
		return nil, err
	}
	logf("storm: %d keys x %d dups, concurrency %d, one instance", o.Keys, o.Dups, o.StormConcurrency)
	res.Storm, err = runStorm(ctx, o, s1.url, nil, counter, 1)
	if err != nil {
		return nil, err
	}

	if o.TwoInstances {
		// Two apps, each with its own middleware (own in-memory lock) and
		// its own Redis client, sharing one Redis and one execution counter.
		counter := loadgen.NewExecCounter()
		var urls []string
		for range 2 {
			st, err := newStorage()
			if err != nil {
				return nil, err
			}
			s, err := start(appConfig{storage: st, counter: counter, markReplays: true})
			if err != nil {
				return nil, err
			}
			urls = append(urls, s.url)
		}
		client := loadgen.NewClient(o.StormConcurrency)
		defer client.CloseIdleConnections()
		rr, err := newRoundRobin(client.Transport, hostOf(urls[0]), hostOf(urls[1]))
		if err != nil {
			return nil, err
		}
		client.Transport = rr
		logf("storm: %d keys x %d dups, concurrency %d, two instances (round robin)", o.Keys, o.Dups, o.StormConcurrency)
		res.StormTwoInstances, err = runStorm(ctx, o, urls[0], client, counter, 2)
		if err != nil {
			return nil, err
		}
	} else {
		res.Notes = append(res.Notes, "two-instance storm skipped (-two-instances=false)")
	}
	return res, nil
}

// runStorm runs one storm and combines its report with the handler-side
// execution counts.
func runStorm(ctx context.Context, o Options, baseURL string, client *http.Client, counter *loadgen.ExecCounter, instances int) (*Storm, error) {
	rep, err := storm.Run(ctx, storm.Config{
		URL:         baseURL + path,
		Keys:        o.Keys,
		Dups:        o.Dups,
		Concurrency: o.StormConcurrency,
		Client:      client,
		MaxFailures: -1, // list every failing key, to count divergent ones
		BodyFor: func(_ string, i int) []byte {
			return fmt.Appendf(nil, `{"amount":%d,"currency":"eur"}`, 100+i)
		},
	})
	if err != nil {
		return nil, err
	}
	sr := &Storm{
		Instances:    instances,
		Keys:         rep.Keys,
		Dups:         rep.Dups,
		Concurrency:  rep.Concurrency,
		Requests:     rep.Requests,
		KeysFailed:   rep.KeysFailed,
		Verdict:      rep.Verdict(),
		Originals:    rep.Originals,
		Replays:      rep.Replays,
		InProgress:   rep.InProgress,
		Errors:       rep.Errors,
		StatusCounts: map[string]int{},
		RPS:          round1(rep.Throughput()),
		P50MS:        ms(rep.Latency.P50),
		P99MS:        ms(rep.Latency.P99),
		ElapsedMS:    ms(rep.Elapsed),
	}
	sr.HandlerExecutions, sr.KeysExecuted, sr.ExecutionsMax, sr.KeysExecutedMoreThanOnce = counter.Summary()
	for code, n := range rep.StatusCounts {
		sr.StatusCounts[strconv.Itoa(code)] = n
	}
	for _, f := range rep.Failures {
		// storm documents this prefix for keys whose final responses
		// (status and body) are not all identical.
		if strings.Contains(f.Reason, "divergent:") {
			sr.DivergentKeys++
		}
	}
	return sr, nil
}

// staticNotes are the facts about fiber's middleware that qualify the
// figures; bench/peers/README.md cites the source lines.
func staticNotes() []string {
	return []string{
		"fiber's default Lock is an in-memory per-process mutex (idempotency.NewMemoryLock); no distributed Locker ships with fiber, so nothing prevents two processes from executing the same key concurrently",
		"concurrent duplicates in one process block on that lock (no 409), then re-read storage and replay the stored response",
		"replays carry no marker header; the storm apps add Idempotent-Replayed: true from idempotency.IsFromCache (harness instrumentation, not fiber behaviour); the throughput apps do not",
		"the stored response is written with a plain SET (last writer wins), and the request body is not fingerprinted: a reused key with a different payload gets the first response",
		"responses are stored only when the handler returns nil; a handler error is not stored and a retry executes again",
		"servers, load generators and redis-server share the same machine; ratios are more meaningful than absolute req/s",
	}
}

// keyMaker builds 36-character idempotency keys (fiber's default validator
// only checks the length) that are unique per run, phase, worker and seq.
type keyMaker struct {
	nonce uint32
}

func (k *keyMaker) key(phase uint16, worker, seq int) string {
	var raw [16]byte
	binary.BigEndian.PutUint32(raw[0:4], k.nonce)
	binary.BigEndian.PutUint16(raw[4:6], phase)
	binary.BigEndian.PutUint16(raw[6:8], uint16(worker))
	binary.BigEndian.PutUint64(raw[8:16], uint64(seq))
	var s [36]byte
	hex.Encode(s[0:8], raw[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], raw[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], raw[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], raw[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], raw[10:16])
	return string(s[:])
}

// newPayment builds one POST /v1/payments request with the given key.
func newPayment(baseURL, key string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, baseURL+path, bytes.NewReader(firstBody))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header[keyHeader] = []string{key}
	return req, nil
}

// expectCreated is the loadgen check of every throughput request.
func expectCreated(resp *http.Response, body []byte) error {
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d: %.80s", resp.StatusCode, body)
	}
	return nil
}

// moduleVersion returns the version of a dependency as built.
func moduleVersion(mod string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == mod {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}

// redisVersion asks the server for its version.
func redisVersion(ctx context.Context, st *redisstorage.Storage) string {
	info, err := st.Conn().Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

func hostOf(baseURL string) string { return strings.TrimPrefix(baseURL, "http://") }

func median(rs []Round, f func(Round) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// ms converts d to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
