package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/metrics"
	"github.com/idemkey/idemkey/internal/redistest"
	spec "github.com/idemkey/idemkey/observe/metrics"
	"github.com/idemkey/idemkey/redisstore"
)

// An evicting Redis fails the doctor (exit 1), which names the policy; the
// address works without a scheme.
func TestDoctorFailsOnAnEvictingRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"))
	r := runBin(t, 60*time.Second, "doctor", "--redis", srv.Addr())
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Regexp(t, `(?m)^fail  maxmemory-policy  volatile-ttl with maxmemory 64\.0 MiB: .*set maxmemory-policy noeviction$`, r.stdout)
	require.Regexp(t, `(?m)^ok    version           Redis \d`, r.stdout)
	// One warning (no persistence), and a second only if the latency
	// check found the round trips slow, as a loaded machine may (.ci/stress:
	// p99 39ms over 300 PINGs).
	want := "1 failed, 1 warning\n"
	if regexp.MustCompile(`(?m)^warn  latency `).MatchString(r.stdout) {
		want = "1 failed, 2 warnings\n"
	}
	require.Contains(t, r.stdout, want)

	r = runBin(t, 60*time.Second, "doctor", "--json", "--redis", "redis://"+srv.Addr()+"/0")
	require.Equal(t, 1, r.code, r.stderr)
	var rep doctorReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, 1, rep.Failed)
	require.Equal(t, srv.Addr()+" db 0", rep.Redis)
	require.Len(t, rep.Checks, 8)
	require.Equal(t, redisstore.CheckResult{Name: "maxmemory-policy", Status: "fail",
		Message: rep.Checks[1].Message}, rep.Checks[1])
	require.Contains(t, rep.Checks[1].Message, "volatile-ttl")
}

// A default redis-server passes (exit 0), with a warning about persistence.
func TestDoctorPassesOnADefaultRedis(t *testing.T) {
	srv := redistest.Start(t)
	r := runBin(t, 60*time.Second, "doctor", "--redis", "redis://"+srv.Addr()+"/0", "--prefix", "app:")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 10, r.stdout)
	require.Equal(t, "redis "+srv.Addr()+` db 0, prefix "app:"`, lines[0])
	for i, name := range []string{"version", "maxmemory-policy", "persistence", "replication", "cluster", "scripts", "latency", "in-progress"} {
		require.Regexp(t, `^(ok|warn) +`+name+` +\S`, lines[i+1])
	}
	require.Equal(t, "ok    maxmemory-policy  noeviction, no maxmemory", lines[2])
	require.Regexp(t, `^warn  persistence       neither AOF nor RDB`, lines[3])
	require.Equal(t, `ok    in-progress       0 records under "app:", none in progress`, lines[8])
	require.Regexp(t, `^0 failed, (1 warning|2 warnings)$`, lines[9], "a loaded machine may find the latency slow")
}

func TestDoctorCannotConnect(t *testing.T) {
	r := runBin(t, 60*time.Second, "doctor", "--redis", "127.0.0.1:1")
	require.Equal(t, 2, r.code, r.stdout)
	require.Contains(t, r.stderr, "idemkey doctor: redis at 127.0.0.1:1")
	// One line says so; go-redis's own dial retries are not printed.
	require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, r.stderr)

	// The JSON report names the server as when connected, without the
	// password the URL carried.
	r = runBin(t, 60*time.Second, "doctor", "--redis", "redis://app:s3cret@127.0.0.1:1/2", "--json")
	require.Equal(t, 2, r.code, r.stdout)
	require.NotContains(t, r.stdout+r.stderr, "s3cret")
	var rep struct{ Redis, Error string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, "127.0.0.1:1 db 2", rep.Redis)
	require.NotEmpty(t, rep.Error)
}

// A cluster is checked master by master, through a cluster client doctor
// makes from one node's address.
func TestDoctorOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	r := runBin(t, 60*time.Second, "doctor", "--redis", cl.Addrs()[1])
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Regexp(t, `(?m)^ok    cluster           cluster of 3 masters`, r.stdout)
	require.Regexp(t, `(?m)^ok    version           Redis \S+ \(cluster, 3 masters\)$`, r.stdout)
}

// serve checks its Redis at start and prints what is not ok.
func TestServeChecksItsRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"))
	s := startServe(t, "--redis", "redis://"+srv.Addr()+"/0")
	s.stderr.waitFor(t, "idemkey serve: redis check: fail maxmemory-policy: allkeys-lru with maxmemory 64.0 MiB")
	s.stderr.waitFor(t, "idemkey serve: redis check: warn persistence: neither AOF nor RDB")
	require.NotContains(t, s.stderr.String(), "check: ok")
	// The checks run on serve's client, not through the pipeliner its store
	// uses, which would hide whether the server is a Ring.
	require.NotContains(t, s.stderr.String(), "cluster")
}

// scrape reads serve's /metrics: its samples by series, and its HELP and
// TYPE lines by metric.
func scrape(t *testing.T, url string) (samples map[string]float64, help, types map[string]string) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, metrics.ContentType, resp.Header.Get("Content-Type"))
	samples, help, types = map[string]float64{}, map[string]string{}, map[string]string{}
	sample := regexp.MustCompile(`^([a-z_]+(?:\{[^}]*\})?) (\S+)$`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, text, _ := strings.Cut(rest, " ")
			help[name] = text
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			types[name] = typ
			continue
		}
		m := sample.FindStringSubmatch(line)
		require.NotNil(t, m, "not a sample: %q", line)
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		samples[m[1]] = v
	}
	require.NoError(t, sc.Err())
	return samples, help, types
}

// serve's /metrics counts what its requests did, and a storm against it
// shows as exactly one execution per key.
func TestServeMetrics(t *testing.T) {
	s := startServe(t, "--provider-latency", "10ms", "--wait", "0s")
	samples, _, _ := scrape(t, s.url)
	require.Equal(t, map[string]float64{"idemkey_leases_held": 0}, samples, "nothing yet")

	for _, tc := range []struct {
		body   string
		status int
	}{{payment, http.StatusCreated}, {payment, http.StatusCreated}, {`{"amount": 1, "currency": "EUR", "customer": "cus_1"}`, http.StatusUnprocessableEntity}} {
		r, err := post(s.url, "sk_test_metrics", "order-1", tc.body)
		require.NoError(t, err)
		require.Equal(t, tc.status, r.status, r.body)
	}
	samples, help, types := scrape(t, s.url)
	const route = `route="POST /v1/payments"`
	require.Equal(t, 1.0, samples[`idemkey_requests_total{outcome="executed",`+route+`}`])
	require.Equal(t, 1.0, samples[`idemkey_requests_total{outcome="replayed",`+route+`}`])
	require.Equal(t, 1.0, samples[`idemkey_requests_total{outcome="mismatch",`+route+`}`])
	require.Equal(t, 0.0, samples["idemkey_leases_held"])
	require.Equal(t, 3.0, samples[`idemkey_redis_seconds_count{script="claim"}`])
	require.Equal(t, 3.0, samples[`idemkey_redis_seconds_bucket{script="claim",le="+Inf"}`])
	require.Equal(t, 1.0, samples[`idemkey_redis_seconds_count{script="complete"}`])
	for _, m := range []*spec.Metric{&spec.Requests, &spec.LeasesHeld, &spec.RedisSeconds} {
		require.Equal(t, string(m.Type), types[m.Name], m.Name)
		require.NotEmpty(t, help[m.Name], m.Name)
	}

	const keys, dups = 20, 8
	r := runBin(t, 120*time.Second, "storm", "--url", s.url+"/v1/payments",
		"-H", "Authorization: Bearer sk_test_storm", "--body", payment,
		"--keys", strconv.Itoa(keys), "--dups", strconv.Itoa(dups), "--concurrency", strconv.Itoa(keys*dups), "--retry", "--json",
		"--timeout", stormTimeout)
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	var rep stormReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	after, _, _ := scrape(t, s.url)
	require.Equal(t, float64(1+keys), after[`idemkey_requests_total{outcome="executed",`+route+`}`], "one execution per key")
	require.Equal(t, 0.0, after["idemkey_leases_held"])
	// Every request that reached serve is counted once, whatever its
	// outcome: on a busy machine some get "unavailable" (a claim past the
	// store's timeout), and an attempt storm gave up on (a transport
	// error) may or may not have reached it.
	var answered float64
	for name, v := range after {
		if strings.HasPrefix(name, `idemkey_requests_total{outcome="`) && strings.HasSuffix(name, ","+route+"}") {
			answered += v - samples[name]
			t.Logf("%s +%v", name, v-samples[name])
		}
	}
	require.Equal(t, keys, rep.Probe.Identical)
	sent := float64(rep.Requests + keys) // and its late probe of each key
	require.LessOrEqual(t, answered, sent, "requests counted that storm did not send (or twice)")
	require.GreaterOrEqual(t, answered, sent-float64(rep.Errors), "requests storm got an answer to, not counted: statuses %v", rep.Statuses)
	require.Positive(t, after[`idemkey_requests_total{outcome="in_progress",`+route+`}`], "--wait 0s: duplicates got 409")
}
