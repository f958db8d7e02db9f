package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore"
)

const lsAbout = `Lists the idempotency records under --prefix, on every master of a cluster,
one line each: its name in Redis, state, attempt, age (since the first
claim: started and released records only, as completion drops the time),
lease left, TTL, and the label (a started record's) or the stored status (a
completed one's), with the recovery point. Neither the scope nor the key is
stored, so neither is shown: a record's name is a hash of both. Text from
clients (labels, recovery points) is printed quoted, as inspect does; so is
any name that is not plain.

  --state S    started (running, or ended without an outcome), released (the
               lease was given back), or completed
  --older D    first claimed more than D ago (such as 10m): started and
               released records only
  --expired    nobody holds them: started records whose lease ran out, and
               released ones; they wait for a retry to take them over

Keys under the prefix that are not idemkey records (another application's,
another type, corrupt) are listed as such whatever the filters, and do not
stop the listing. 'ls' reads with SCAN (never KEYS), about 1000 keys a call,
and holds one call's keys at a time; --json prints one JSON object whose
"records" array streams as the scan goes. Redis comes from --redis, else
$REDIS_URL, else 127.0.0.1:6379.

Exit status: 0 when the scan completed, 2 on a usage error or when Redis
cannot be reached or fails during the scan.
`

// lsEntry is one line of ls, and one element of --json's records.
type lsEntry struct {
	Name          string     `json:"name"`
	Server        string     `json:"server"`
	State         string     `json:"state,omitempty"`
	Attempt       int        `json:"attempt,omitempty"`
	Label         string     `json:"label,omitempty"`
	Fingerprint   string     `json:"fingerprint,omitempty"` // hex
	RecoveryPoint string     `json:"recovery_point,omitempty"`
	CreatedAt     *time.Time `json:"created_at,omitempty"`
	AgeMS         *int64     `json:"age_ms,omitempty"`
	TTLMS         *int64     `json:"ttl_ms,omitempty"`       // set for records only
	LeaseTTLMS    *int64     `json:"lease_ttl_ms,omitempty"` // set for records only
	Status        int        `json:"status,omitempty"`       // a completed record's stored status
	// Problem says why the key is not an idemkey record; the fields above
	// Name and Server are then empty.
	Problem string `json:"problem,omitempty"`
}

// lsSummary is --json's "summary": what the scan saw.
type lsSummary struct {
	Servers       int   `json:"servers"`
	Keys          int   `json:"keys"`
	Records       int   `json:"records"`
	Listed        int   `json:"listed"`
	NotRecords    int   `json:"not_records"`
	Tombstones    int   `json:"tombstones"`
	ScanCalls     int   `json:"scan_calls"`
	SlowestScanUS int64 `json:"slowest_scan_us"`
}

func newLSEntry(prefix string, sc *redisstore.Scanned, now time.Time) lsEntry {
	e := lsEntry{Name: sc.Name, Server: sc.Server, Problem: sc.Problem}
	rec := sc.Record
	if rec == nil {
		return e
	}
	d := describeRecord(prefix, rec, nil) // inspect's reading of a record
	e.State, e.Attempt, e.Label, e.Fingerprint, e.RecoveryPoint = d.State, d.Attempt, d.Label, d.Fingerprint, d.RecoveryPoint
	e.CreatedAt, e.TTLMS, e.LeaseTTLMS = d.CreatedAt, &d.TTLMS, &d.LeaseTTLMS
	if d.CreatedAt != nil {
		age := now.Sub(*d.CreatedAt).Milliseconds()
		e.AgeMS = &age
	}
	if rec.Response != nil {
		e.Status = rec.Response.Code
	}
	return e
}

func ls(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ls", "[--redis URL] [--prefix idem:] [--state started|released|completed] [--older D] [--expired] [--json]", lsAbout, stderr)
	var (
		redisURL = redisFlag(fs, "Redis `address`: host:port[/db] or a redis:// or rediss:// URL; default $REDIS_URL, else 127.0.0.1:6379")
		prefix   = fs.String("prefix", "idem:", "the store's key prefix (redisstore.Options.Prefix)")
		state    = fs.String("state", "", "list only records in this `state`: started, released or completed")
		older    = fs.Duration("older", 0, "list only records first claimed more than this `duration` ago (started and released ones)")
		expired  = fs.Bool("expired", false, "list only records nobody holds: leases that ran out, or were released")
		asJSON   = fs.Bool("json", false, "print one JSON object: the records, then a summary")
	)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "ls", "unexpected argument %q", fs.Arg(0))
	}
	opts := redisstore.ScanOptions{State: redisstore.State(*state), Older: *older, LeaseExpired: *expired}
	switch opts.State {
	case "", redisstore.Started, redisstore.Released, redisstore.Completed:
	default:
		return usageError(stderr, "ls", "--state %q: want started, released or completed", *state)
	}
	if *older < 0 {
		return usageError(stderr, "ls", "--older must not be negative")
	}
	store, closeStore, code := openOperatorStore(ctx, "ls", redisURL(), *prefix, 0, stderr)
	if store == nil {
		return code
	}
	defer closeStore()

	now := time.Now()
	var out lsWriter = &lsText{w: stdout, prefix: *prefix, now: now}
	if *asJSON {
		out = &lsJSON{w: stdout, prefix: *prefix}
	}
	if err := out.begin(); err != nil {
		fmt.Fprintf(stderr, "idemkey ls: %v\n", err)
		return 2
	}
	sum, err := store.Scan(ctx, opts, func(sc *redisstore.Scanned) error { return out.entry(newLSEntry(*prefix, sc, now)) })
	s := lsSummary{Servers: sum.Servers, Keys: sum.Keys, Records: sum.Records, Listed: sum.Matched, NotRecords: sum.NotRecords,
		Tombstones: sum.Tombstones, ScanCalls: sum.Calls, SlowestScanUS: sum.SlowestCall.Microseconds()}
	if werr := out.end(s, err); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey ls: %v\n", err)
		return 2
	}
	return 0
}

// openOperatorStore connects to the Redis of --redis (every master of a
// cluster) and returns a store on it, a function that closes both, or nil
// and the exit code after saying why on stderr.
func openOperatorStore(ctx context.Context, cmd, redisURL, prefix string, lease time.Duration, stderr io.Writer) (*redisstore.Store, func(), int) {
	addr := redisURL
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if _, err := redisOptions(addr); err != nil {
		return nil, nil, usageError(stderr, cmd, "%v", err)
	}
	redis.SetLogger(quietRedisLog{}) // a failure to connect is reported once, below
	rdb, err := connect(ctx, addr)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey %s: %v\n", cmd, err)
		return nil, nil, 2
	}
	client, err := clusterAware(ctx, rdb)
	if err != nil {
		_ = rdb.Close()
		fmt.Fprintf(stderr, "idemkey %s: %v\n", cmd, err)
		return nil, nil, 2
	}
	closeAll := func() {
		if client != redis.UniversalClient(rdb) {
			_ = client.Close()
		}
		_ = rdb.Close()
	}
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Lease: lease, Retention: max(24*time.Hour, 2*lease)})
	if err != nil {
		closeAll()
		return nil, nil, usageError(stderr, cmd, "%v", err)
	}
	return store, closeAll, 0
}

// lsWriter prints ls's output as the scan goes.
type lsWriter interface {
	begin() error
	entry(e lsEntry) error
	end(s lsSummary, scanErr error) error
}

// lsText prints a line per key in fixed columns (no tabwriter: it would
// hold every line until the end).
type lsText struct {
	w      io.Writer
	prefix string
	now    time.Time
	width  int
}

func (t *lsText) begin() error {
	t.width = len(t.prefix) + 24 // <prefix>{<22 characters>}
	_, err := fmt.Fprintf(t.w, "%-*s  %-9s  %7s  %9s  %9s  %9s  %s\n", t.width, "NAME", "STATE", "ATTEMPT", "AGE", "LEASE", "TTL", "LABEL OR STATUS, RECOVERY")
	return err
}

func (t *lsText) entry(e lsEntry) error {
	name := plainName(e.Name)
	if e.Problem != "" {
		_, err := fmt.Fprintf(t.w, "%-*s  not an idemkey record: %s\n", t.width, name, e.Problem)
		return err
	}
	age, lease := "-", "-"
	if e.AgeMS != nil {
		age = shortDuration(time.Duration(*e.AgeMS) * time.Millisecond)
	}
	if e.State == string(redisstore.Started) {
		lease = "none"
		if *e.LeaseTTLMS > 0 {
			lease = shortDuration(time.Duration(*e.LeaseTTLMS) * time.Millisecond)
		}
	}
	what := quoteText(e.Label)
	if e.State == string(redisstore.Completed) {
		what = fmt.Sprint(e.Status)
	}
	if e.RecoveryPoint != "" {
		what += ", recovery " + quoteText(e.RecoveryPoint)
	}
	_, err := fmt.Fprintf(t.w, "%-*s  %-9s  %7d  %9s  %9s  %9s  %s\n", t.width, name, e.State, e.Attempt, age, lease,
		shortDuration(time.Duration(*e.TTLMS)*time.Millisecond), what)
	return err
}

func (t *lsText) end(s lsSummary, scanErr error) error {
	status := ""
	if scanErr != nil {
		status = " (the scan stopped: see below)"
	}
	notRecords := fmt.Sprintf("%d keys that are not records", s.NotRecords)
	if s.NotRecords == 1 {
		notRecords = "1 key that is not a record"
	}
	_, err := fmt.Fprintf(t.w, "%d listed of %d records under %q on %d server%s, %s%s; %d SCAN call%s, the slowest %s\n",
		s.Listed, s.Records, t.prefix, s.Servers, plural(s.Servers), notRecords, status,
		s.ScanCalls, plural(s.ScanCalls), time.Duration(s.SlowestScanUS)*time.Microsecond)
	return err
}

// lsJSON streams one JSON object: {"prefix", "records": [...], "summary",
// and "error" if the scan stopped}.
type lsJSON struct {
	w      io.Writer
	prefix string
	n      int
}

func (j *lsJSON) begin() error {
	p, _ := json.Marshal(j.prefix)
	_, err := fmt.Fprintf(j.w, "{\"prefix\":%s,\"records\":[", p)
	return err
}

func (j *lsJSON) entry(e lsEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	sep := ",\n"
	if j.n == 0 {
		sep = "\n"
	}
	j.n++
	_, err = io.WriteString(j.w, sep+string(b))
	return err
}

func (j *lsJSON) end(s lsSummary, scanErr error) error {
	b, _ := json.Marshal(s)
	tail := fmt.Sprintf("\n],\"summary\":%s", b)
	if scanErr != nil {
		e, _ := json.Marshal(scanErr.Error())
		tail += fmt.Sprintf(",\"error\":%s", e)
	}
	_, err := io.WriteString(j.w, tail+"}\n")
	return err
}

// plainName returns a key name as it is when it is printable ASCII without
// spaces or quotes, else quoted (quoteText): another application's key
// under the prefix may hold any bytes.
func plainName(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return quoteText(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// shortDuration cuts d short for a column: 950ms, 12.3s, 4m10s, 23h59m,
// 2d4h (never rounding up: a TTL of 23h59m59s is not 24h).
func shortDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Truncate(time.Millisecond).String()
	case d < time.Minute:
		return d.Truncate(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Truncate(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
	}
	days := int(d / (24 * time.Hour))
	return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
}
