package faulttest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/lua"
	"github.com/idemkey/idemkey/redisstore"
)

// The test binary doubles as the crash-test server: with IDEMKEY_CHILD set
// it serves a payments endpoint and kills itself with SIGKILL at the point
// IDEMKEY_CRASH_AT names, with its store on the client's auto-pipeliner when
// IDEMKEY_PIPELINED is set.
func init() {
	if os.Getenv("IDEMKEY_CHILD") != "" {
		os.Exit(childMain())
	}
}

// The points of the flow a child can die at.
const (
	crashAfterClaim      = "after-claim"      // lease held, nothing done
	crashAfterCharge     = "after-charge"     // the provider charged, no checkpoint yet
	crashAfterCheckpoint = "after-checkpoint" // checkpointed, not completed
	crashBeforeComplete  = "before-complete"  // complete about to be sent
	crashAfterComplete   = "after-complete"   // complete applied, reply not acted on
)

func die(point string) {
	if os.Getenv("IDEMKEY_CRASH_AT") == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deferred; never go on
	}
}

// crashHook kills the process around the complete script, sent alone or in
// a batch of the auto-pipeliner.
type crashHook struct{ completeSHA string }

func (h crashHook) isComplete(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && cmd.Name() == "evalsha" && args[1] == h.completeSHA
}

func (crashHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h crashHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		isComplete := h.isComplete(cmd)
		if isComplete {
			die(crashBeforeComplete)
		}
		err := next(ctx, cmd)
		if isComplete && err == nil {
			die(crashAfterComplete)
		}
		return err
	}
}
func (h crashHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var complete redis.Cmder
		for _, cmd := range cmds {
			if h.isComplete(cmd) {
				complete = cmd
			}
		}
		if complete != nil {
			die(crashBeforeComplete)
		}
		err := next(ctx, cmds)
		if complete != nil && complete.Err() == nil {
			die(crashAfterComplete)
		}
		return err
	}
}

func childMain() int {
	lease, _ := time.ParseDuration(os.Getenv("IDEMKEY_LEASE"))
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("IDEMKEY_REDIS"), ContextTimeoutEnabled: true})
	sum := sha1.Sum([]byte(lua.Complete))
	rdb.AddHook(crashHook{completeSHA: hex.EncodeToString(sum[:])})
	var sc redis.Scripter = rdb
	if os.Getenv("IDEMKEY_PIPELINED") != "" {
		ap, err := rdb.AutoPipeline()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		sc = ap
	}
	store, err := redisstore.New(sc, redisstore.Options{Lease: lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	prov := provider{rdb}
	mux := http.NewServeMux()
	mux.Handle("POST /pay", httpmw.New(store, httpmw.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		die(crashAfterClaim)
		point, data := httpmw.RecoveryPoint(ctx)
		charge := string(data)
		if point != "charged" {
			if charge, err = prov.charge(ctx, httpmw.DerivedKey(ctx, "charge")); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			die(crashAfterCharge)
			if err := httpmw.Checkpoint(ctx, "charged", []byte(charge)); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			die(crashAfterCheckpoint)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"charge": charge, "resumed": point != "", "pid": os.Getpid()})
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("listening %s\n", ln.Addr())
	_ = http.Serve(ln, mux)
	return 0
}

// provider is the stand-in for an external payment provider: it keeps its
// charges in Redis, so they outlive a crash of the API, and dedupes on the
// idempotency key it is handed.
type provider struct{ rdb *redis.Client }

// chargeScript: KEYS[1]=dedupe record KEYS[2]=charge counter KEYS[3]=dedupe counter
var chargeScript = redis.NewScript(`
local id = redis.call('GET', KEYS[1])
if id then
  redis.call('INCR', KEYS[3])
  return id
end
id = 'ch_' .. redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], id, 'EX', 3600)
return id`)

func (p provider) charge(ctx context.Context, key string) (string, error) {
	return chargeScript.Run(ctx, p.rdb, []string{"provider:" + key, "provider:charges", "provider:dedup"}).Text()
}

func (p provider) counts(ctx context.Context) (charges, dedup int) {
	c, _ := p.rdb.Get(ctx, "provider:charges").Result()
	d, _ := p.rdb.Get(ctx, "provider:dedup").Result()
	charges, _ = strconv.Atoi(c)
	dedup, _ = strconv.Atoi(d)
	return charges, dedup
}
