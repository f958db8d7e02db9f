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
	"github.com/idemkey/idemkey/internal/storm"
	"github.com/idemkey/idemkey/redisstore"
)

// storm runs one retry storm against url and counts, on the server side,
// the executions of each key across apps.
func (r *runner) storm(ctx context.Context, name, url string, client *http.Client, apps []*app, instances, masters int) (*StormResult, error) {
	counter := loadgen.NewExecCounter()
	for _, a := range apps {
		a.counter.Store(counter)
	}
	rep, err := storm.Run(ctx, storm.Config{
		URL: url, Keys: r.cfg.StormKeys, Dups: r.cfg.StormDups, Concurrency: r.cfg.StormConcurrency,
		Client: client, MaxFailures: -1, KeyPrefix: r.nonce + "-storm-",
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
	s := &StormResult{
		Contender: name, Instances: instances, Masters: masters,
		Keys: rep.Keys, Dups: rep.Dups, Concurrency: rep.Concurrency, Requests: rep.Requests,
		Verdict: rep.Verdict(), KeysFailed: rep.KeysFailed,
		Originals: rep.Originals, Replays: rep.Replays, InProgress: rep.InProgress, Errors: rep.Errors,
		Status: rep.StatusCounts, RPS: round1(rep.Throughput()),
		P50MS: ms(rep.Latency.P50), P99MS: ms(rep.Latency.P99),
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

// twoInstances storms ours on two Gin instances that share the Redis, each
// with its own client and middleware, as two processes would.
func (r *runner) twoInstances(ctx context.Context) (*StormResult, error) {
	var apps []*app
	var hosts []string
	for range 2 {
		client := newRedisClient(r.redis.Addr())
		defer client.Close()
		store, err := redisstore.New(client, redisstore.Options{})
		if err != nil {
			return nil, err
		}
		a := &app{}
		srv, err := serve(oursEngine(a, store))
		if err != nil {
			return nil, err
		}
		defer srv.close()
		apps = append(apps, a)
		hosts = append(hosts, strings.TrimPrefix(srv.url, "http://"))
	}
	hc := loadgen.NewClient(r.cfg.StormConcurrency)
	defer hc.CloseIdleConnections()
	hc.Transport = &roundRobin{next: hc.Transport, hosts: hosts}
	r.log("storm: ours on two instances, %d keys x %d dups, concurrency %d", r.cfg.StormKeys, r.cfg.StormDups, r.cfg.StormConcurrency)
	return r.storm(ctx, Ours, "http://"+hosts[0]+paymentPath, hc, apps, 2, 1)
}

// cluster storms ours on a Redis Cluster: the same middleware, a
// redis.ClusterClient in place of a redis.Client.
func (r *runner) cluster(ctx context.Context) error {
	r.log("cluster: starting %d masters", r.cfg.Masters)
	cl, err := redistest.LaunchCluster(filepath.Join(r.dir, "cluster"), r.cfg.Masters)
	if err != nil {
		return err
	}
	defer cl.Close()
	client := redis.NewClusterClient(cl.Options())
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		return err
	}
	a := &app{}
	srv, err := serve(oursEngine(a, store))
	if err != nil {
		return err
	}
	defer srv.close()
	hc := loadgen.NewClient(r.cfg.StormConcurrency)
	defer hc.CloseIdleConnections()
	r.log("storm: ours on the cluster, %d keys x %d dups, concurrency %d", r.cfg.StormKeys, r.cfg.StormDups, r.cfg.StormConcurrency)
	s, err := r.storm(ctx, Ours, srv.url+paymentPath, hc, []*app{a}, 1, cl.Masters())
	if err != nil {
		return err
	}
	res := &Cluster{Masters: cl.Masters(), Storm: s}
	for i := range cl.Masters() {
		nc := redis.NewClient(cl.Node(i).Options())
		n, err := nc.DBSize(ctx).Result()
		_ = nc.Close()
		if err != nil {
			return err
		}
		res.RecordsPerMaster = append(res.RecordsPerMaster, n)
	}
	r.res.Cluster = res
	return nil
}
