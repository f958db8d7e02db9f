package bench

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/loadgen"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/storm"
)

// storm runs one retry storm against url and counts, on the server side,
// the executions of each key across apps, the calls the contender's clients
// made (counters) and the commands redis-server ran (on every one of admins,
// whose statistics it resets).
func (r *runner) storm(ctx context.Context, name, url string, client *http.Client, apps []*app,
	counters []*cmdCounter, admins []*redis.Client, instances, masters int) (*StormResult, error) {
	counter := loadgen.NewExecCounter()
	for _, a := range apps {
		a.counter.Store(counter)
	}
	for _, a := range admins {
		if err := a.ConfigResetStat(ctx).Err(); err != nil {
			return nil, err
		}
	}
	var trips int64
	for _, c := range counters {
		trips -= c.trips.Load()
	}
	rep, err := storm.Run(ctx, storm.Config{
		URL: url, Keys: r.cfg.StormKeys, Dups: r.cfg.StormDups, Concurrency: r.cfg.StormConcurrency,
		Client: client, MaxFailures: -1, KeyPrefix: r.nonce + "-storm-",
		// The storm itself, 10 duplicates a key: the handler's execution
		// counts are the ground truth, and a late probe would add an 11th
		// request to every key's Redis cost.
		NoProbe: true,
		BodyFor: func(_ string, i int) []byte {
			return fmt.Appendf(nil, `{"amount":%d,"currency":"eur"}`, 100+i)
		},
	})
	for _, a := range apps {
		a.counter.Store(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("storm %s: %w", name, err)
	}
	for _, c := range counters {
		trips += c.trips.Load()
	}
	stats := map[string]int64{}
	for _, a := range admins {
		st, err := commandStats(ctx, a)
		if err != nil {
			return nil, err
		}
		for k, v := range st {
			stats[k] += v
		}
	}
	s := &StormResult{
		Contender: name, Instances: instances, Masters: masters,
		Keys: rep.Keys, Dups: rep.Dups, Concurrency: rep.Concurrency, Requests: rep.Requests,
		Verdict: rep.Verdict(), KeysFailed: rep.KeysFailed,
		Originals: rep.Originals, Replays: rep.Replays, InProgress: rep.InProgress, Errors: rep.Errors,
		Status: rep.StatusCounts, RPS: round1(rep.Throughput()),
		P50MS: ms(rep.Latency.P50), P99MS: ms(rep.Latency.P99),
		RoundTripsPerKey: round3(float64(trips) / float64(rep.Keys)),
		Server:           commandsOf(stats, rep.Keys),
	}
	s.HandlerExecutions, s.KeysExecuted, s.ExecutionsMax, s.KeysExecutedMoreThanOnce = counter.Summary()
	for _, f := range rep.Failures {
		// storm documents this marker for keys whose clients got
		// different final responses.
		if strings.Contains(f.Reason, "divergent:") {
			s.DivergentKeys++
		}
	}
	return s, nil
}

// twoInstances storms a variant of ours on two Gin instances that share the
// Redis, each with its own client and middleware, as two processes would.
func (r *runner) twoInstances(ctx context.Context, sp spec) (*StormResult, error) {
	var apps []*app
	var hosts []string
	var counts []*cmdCounter
	for range 2 {
		client := newRedisClient(r.redis.Addr())
		defer client.Close()
		count := &cmdCounter{}
		client.AddHook(count)
		store, err := sp.newStore(client)
		if err != nil {
			return nil, err
		}
		a := &app{}
		srv, err := serve(oursEngine(a, store, sp.mwOptions()))
		if err != nil {
			return nil, err
		}
		defer srv.close()
		apps = append(apps, a)
		counts = append(counts, count)
		hosts = append(hosts, strings.TrimPrefix(srv.url, "http://"))
	}
	hc := loadgen.NewClient(r.cfg.StormConcurrency)
	defer hc.CloseIdleConnections()
	hc.Transport = &roundRobin{next: hc.Transport, hosts: hosts}
	r.log("storm: %s on two instances, %d keys x %d dups, concurrency %d", sp.name, r.cfg.StormKeys, r.cfg.StormDups, r.cfg.StormConcurrency)
	return r.storm(ctx, sp.name, "http://"+hosts[0]+paymentPath, hc, apps, counts, []*redis.Client{r.admin}, 2, 1)
}

// cluster storms each variant of ours on a Redis Cluster: the same
// middleware, a redis.ClusterClient in place of a redis.Client.
func (r *runner) cluster(ctx context.Context) error {
	r.log("cluster: starting %d masters", r.cfg.Masters)
	cl, err := redistest.LaunchCluster(filepath.Join(r.dir, "cluster"), r.cfg.Masters)
	if err != nil {
		return err
	}
	defer cl.Close()
	var admins []*redis.Client
	for i := range cl.Masters() {
		nc := redis.NewClient(cl.Node(i).Options())
		defer nc.Close()
		admins = append(admins, nc)
	}
	dbsize := func() ([]int64, error) {
		var n []int64
		for _, a := range admins {
			v, err := a.DBSize(ctx).Result()
			if err != nil {
				return nil, err
			}
			n = append(n, v)
		}
		return n, nil
	}
	for _, name := range r.ours() {
		sp := r.cs[name].spec
		res, err := r.clusterStorm(ctx, sp, cl, admins, dbsize)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.res.Cluster = append(r.res.Cluster, res)
	}
	return nil
}

func (r *runner) clusterStorm(ctx context.Context, sp spec, cl *redistest.Cluster, admins []*redis.Client,
	dbsize func() ([]int64, error)) (*Cluster, error) {
	client := redis.NewClusterClient(cl.Options())
	defer client.Close()
	count := &cmdCounter{}
	client.AddHook(count)
	store, err := sp.newStore(client)
	if err != nil {
		return nil, err
	}
	a := &app{}
	srv, err := serve(oursEngine(a, store, sp.mwOptions()))
	if err != nil {
		return nil, err
	}
	defer srv.close()
	hc := loadgen.NewClient(r.cfg.StormConcurrency)
	defer hc.CloseIdleConnections()
	before, err := dbsize()
	if err != nil {
		return nil, err
	}
	r.log("storm: %s on the cluster, %d keys x %d dups, concurrency %d", sp.name, r.cfg.StormKeys, r.cfg.StormDups, r.cfg.StormConcurrency)
	s, err := r.storm(ctx, sp.name, srv.url+paymentPath, hc, []*app{a}, []*cmdCounter{count}, admins, 1, cl.Masters())
	if err != nil {
		return nil, err
	}
	after, err := dbsize()
	if err != nil {
		return nil, err
	}
	res := &Cluster{Masters: cl.Masters(), Storm: s}
	for i := range after {
		res.RecordsPerMaster = append(res.RecordsPerMaster, after[i]-before[i])
	}
	return res, nil
}
