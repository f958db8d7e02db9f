package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/idemkey/idemkey/redisstore"
)

const forgetAbout = `Forgets the idempotency record of KEY, and its tombstone, so that the next
request with the key runs the operation again, as a first attempt: for a
stored outcome that must not be replayed any more, or a run that ended
without one. It shows the record and asks before it forgets, unless --yes;
when stdin is not a terminal it cannot ask, and refuses without --yes.

--name NAME names the record by its name in Redis instead, as 'idemkey ls'
and 'idemkey doctor' show it (such as 'idem:{avlxKIzQiMeimyb4J373oQ}'), for
a record whose scope and key you do not know: the record keeps neither.

A started record whose lease is live belongs to a running owner: forgetting
it would let a duplicate run beside it, so forget refuses, unless --force.
Forced, the owner is fenced: its outcome will not be stored, and its
heartbeat stops its run within a heartbeat interval; until then it keeps
running. Force only an owner you know to be stuck. (Within a lease of a Redis
restart, a lease that ran out counts as live, as it does for a claim:
--lease is the store's lease, redisstore.Options.Lease.)

` + scopeAbout + `

Redis comes from --redis (host:port[/db], or a redis://, rediss:// or
unix:// URL), else $REDIS_URL, else 127.0.0.1:6379; on a cluster, any node.

Exit status: 0 when the record was forgotten, 1 when there is none, 2 on a
usage error (stdin not a terminal without --yes included) or when Redis cannot
be reached, 3 when nothing was forgotten: the lease is live and no --force,
or the answer was not yes.

A forget prints one audit line on stderr (time, record name, prefix, server,
forced or not, the record's state and attempt; never a scope, key or
credential). The application's Observer does not see a forget made here:
keep these lines if you need a trail.
`

// Where forget reads its answer, and whether that is a terminal: variables
// for the tests.
var (
	forgetStdin           = io.Reader(os.Stdin)
	forgetStdinIsTerminal = func() bool { return isatty.IsTerminal(os.Stdin.Fd()) || isatty.IsCygwinTerminal(os.Stdin.Fd()) }
)

const (
	forgetRefused        = 3                // exit status: nothing forgotten (a live lease, or not confirmed)
	forgetConfirmTimeout = 10 * time.Minute // an unanswered prompt gives up
	forgetCallTimeout    = 10 * time.Second // each call to Redis
	forgetLiveLease      = "its owner holds a live lease (%s left) and is running, or was until lately: " +
		"forgetting it would let a duplicate run beside it. Wait for the lease to end, or pass --force to fence the owner"
)

func forget(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("forget", "[--redis URL] [--prefix idem:] ((--scope S | --bearer TOKEN | --authorization V) KEY | --name NAME) [--force] [--yes] [--lease D]", forgetAbout, stderr)
	var (
		redisURL = redisFlag(fs, "Redis `address`: host:port[/db] or a redis:// or rediss:// URL; default $REDIS_URL, else 127.0.0.1:6379")
		prefix   = fs.String("prefix", "idem:", "the store's key prefix (redisstore.Options.Prefix)")
		lease    = fs.Duration("lease", 10*time.Second, "the store's `lease` (redisstore.Options.Lease), for the grace after a Redis restart")
		force    = fs.Bool("force", false, "forget a record whose lease is live too, fencing its owner")
		yes      = fs.Bool("yes", false, "forget without asking")
		name     = fs.String("name", "", "the record's `name` in Redis, as 'idemkey ls' and 'idemkey doctor' show it, instead of a scope and KEY")
		names    = addRecordFlags(fs)
	)
	positional, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	var scope, key string
	if isSet(fs, "name") {
		switch {
		case *name == "":
			return usageError(stderr, "forget", "--name is empty: want a record's name, as 'idemkey ls' shows it")
		case len(positional) > 0 || isSet(fs, "scope") || isSet(fs, "bearer") || isSet(fs, "authorization"):
			return usageError(stderr, "forget", "--name names the record on its own: no KEY, and none of --scope, --bearer or --authorization")
		}
	} else {
		var err error
		if scope, key, err = names.record(positional); err != nil {
			return usageError(stderr, "forget", "%v (or name the record with --name)", err)
		}
	}
	if *lease <= 0 {
		return usageError(stderr, "forget", "--lease must be positive")
	}
	if !*yes && !forgetStdinIsTerminal() {
		return usageError(stderr, "forget", "stdin is not a terminal, so forget cannot ask before it forgets: pass --yes to forget without asking")
	}
	store, closeStore, code := openOperatorStore(ctx, "forget", redisURL(), *prefix, *lease, stderr)
	if store == nil {
		return code
	}
	defer closeStore()
	tg := forgetTarget{store: store, name: *name, byName: *name != "", scope: scope, key: key, redis: redisURL(),
		what: fmt.Sprintf("key %s in scope %s under prefix %s", quoteText(key), quoteText(scope), quoteText(*prefix))}
	if tg.byName {
		tg.what = "name " + plainName(tg.name)
	} else {
		tg.name = store.RecordName(scope, key)
	}

	lctx, cancel := context.WithTimeout(ctx, forgetCallTimeout)
	rec, err := tg.lookup(lctx)
	cancel()
	var summary string
	live := false
	var nameErr *redisstore.NameError
	switch {
	case errors.As(err, &nameErr):
		return usageError(stderr, "forget", "--name: %s is not the name of a record under --prefix %s: %s",
			quoteText(nameErr.Name), quoteText(nameErr.Prefix), nameErr.Reason)
	case errors.Is(err, redisstore.ErrNotFound):
		summary = "no record, only its tombstone if one is left (the outcome expired)"
	case err != nil:
		fmt.Fprintf(stderr, "idemkey forget: %v\n", err)
		return 2
	default:
		summary = recordSummary(rec)
		live = rec.State == redisstore.Started && rec.LeaseTTL > 0
	}
	if live && !*force {
		fmt.Fprintf(stderr, "idemkey forget: %s: %s\n", tg.what, fmt.Sprintf(forgetLiveLease, shortDuration(rec.LeaseTTL)))
		return forgetRefused
	}
	if !*yes {
		fmt.Fprintf(stderr, "The record of %s: %s.\n", tg.what, summary)
		if live {
			fmt.Fprint(stderr, "Its owner holds a live lease and may still be running: forcing fences it (its outcome "+
				"will not be stored), and the next request runs beside it while it does.\n")
		}
		if rec != nil && rec.State != redisstore.Completed && (rec.Attempt > 1 || rec.RecoveryPoint != "") {
			fmt.Fprint(stderr, "Its runs may have done part of the work: the next request starts over as attempt 1, "+
				"knowing nothing of them, where a retry without forgetting would take the record over and resume "+
				"from its recovery point.\n")
		}
		if err := confirm(ctx, stderr); err != nil {
			fmt.Fprintf(stderr, "idemkey forget: %v: nothing forgotten\n", err)
			return forgetRefused
		}
	}
	return tg.forgetNow(ctx, rec, *prefix, *force, summary, stdout, stderr)
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// forgetTarget is the record forget acts on: named by its scope and key, or
// by its name in Redis (--name; scope and key are then empty).
type forgetTarget struct {
	store      *redisstore.Store
	name       string // the record's name in Redis, either way
	byName     bool   // named by --name
	scope, key string
	redis      string // --redis, for the audit line (credentials taken out)
	what       string // how messages name the record
}

func (tg *forgetTarget) lookup(ctx context.Context) (*redisstore.Record, error) {
	if tg.byName {
		return tg.store.LookupName(ctx, tg.name)
	}
	return tg.store.Lookup(ctx, tg.scope, tg.key)
}

func (tg *forgetTarget) forget(ctx context.Context, force bool) error {
	switch {
	case tg.byName && force:
		return tg.store.ForceForgetName(ctx, tg.name)
	case tg.byName:
		return tg.store.ForgetName(ctx, tg.name)
	case force:
		return tg.store.ForceForget(ctx, tg.scope, tg.key)
	}
	return tg.store.Forget(ctx, tg.scope, tg.key)
}

// forgetNow forgets the record and says how it went; rec is what the
// lookup before found (nil for none).
func (tg *forgetTarget) forgetNow(ctx context.Context, rec *redisstore.Record, prefix string, force bool, summary string, stdout, stderr io.Writer) int {
	fctx, cancel := context.WithTimeout(ctx, forgetCallTimeout)
	defer cancel()
	err := tg.forget(fctx, force)
	var ip *redisstore.InProgressError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		fmt.Fprintf(stderr, "idemkey forget: no record for %s: never claimed, released after a failure, expired, or another scope or prefix\n", tg.what)
		return 1
	case errors.As(err, &ip):
		fmt.Fprintf(stderr, "idemkey forget: %s: %s\n", tg.what, fmt.Sprintf(forgetLiveLease, shortDuration(ip.LeaseLeft)))
		return forgetRefused
	case errors.Is(err, redisstore.ErrNotReplicated):
		tg.audit(stderr, rec, prefix, force, err)
		fmt.Fprintf(stdout, "forgot the record of %s (%s), but %v\n", tg.what, summary, err)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "idemkey forget: %v\n", err)
		return 2
	}
	tg.audit(stderr, rec, prefix, force, nil)
	fmt.Fprintf(stdout, "forgot the record of %s (%s): the next request with the key runs again\n", tg.what, summary)
	return 0
}

// audit prints the forget's audit line on stderr: one logfmt line (slog's
// text format) with what was forgotten and how, and no scope, key or
// credential, since the application's Observer never sees a forget made
// from here.
func (tg *forgetTarget) audit(stderr io.Writer, rec *redisstore.Record, prefix string, force bool, replication error) {
	attrs := []any{"name", tg.name, "prefix", prefix, "forced", force, "by_name", tg.byName}
	if o, err := redisOptions(cmp.Or(tg.redis, "127.0.0.1:6379")); err == nil {
		attrs = append(attrs, "redis", optionsName(o))
	}
	state, attempt := "tombstone only", 0
	if rec != nil {
		state, attempt = string(rec.State), rec.Attempt
	}
	attrs = append(attrs, "state", state, "attempt", attempt)
	if u, err := user.Current(); err == nil {
		attrs = append(attrs, "user", u.Username)
	}
	if replication != nil {
		attrs = append(attrs, "replication", replication.Error())
	}
	slog.New(slog.NewTextHandler(stderr, nil)).Info("idemkey forget: audit: record forgotten", attrs...)
}

// confirm asks on stderr and reads the answer from forgetStdin.
func confirm(ctx context.Context, stderr io.Writer) error {
	fmt.Fprint(stderr, "Forget it? The next request with the key runs the operation again. [y/N] ")
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(forgetStdin).ReadString('\n')
		answer <- strings.ToLower(strings.TrimSpace(line))
	}()
	select {
	case a := <-answer:
		if a == "y" || a == "yes" {
			return nil
		}
		return errors.New("not confirmed")
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(forgetConfirmTimeout):
		return errors.New("no answer")
	}
}

// recordSummary describes a record in one line, client text quoted.
func recordSummary(rec *redisstore.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, attempt %d", rec.State, rec.Attempt)
	switch rec.State {
	case redisstore.Completed:
		fmt.Fprintf(&b, ", stored status %d", rec.Response.Code)
	default:
		fmt.Fprintf(&b, ", label %s", quoteText(rec.Label))
		if rec.RecoveryPoint != "" {
			fmt.Fprintf(&b, ", recovery point %s", quoteText(rec.RecoveryPoint))
		}
		if !rec.CreatedAt.IsZero() {
			fmt.Fprintf(&b, ", first claimed %s ago", shortDuration(time.Since(rec.CreatedAt)))
		}
		switch {
		case rec.State == redisstore.Released:
			b.WriteString(", lease given back")
		case rec.LeaseTTL > 0:
			fmt.Fprintf(&b, ", lease %s left", shortDuration(rec.LeaseTTL))
		default:
			b.WriteString(", lease ran out")
		}
	}
	fmt.Fprintf(&b, ", expires in %s", shortDuration(rec.TTL))
	return b.String()
}
