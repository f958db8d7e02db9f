package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
	fs := newFlagSet("forget", "[--redis URL] [--prefix idem:] (--scope S | --bearer TOKEN | --authorization V) [--force] [--yes] [--lease D] KEY", forgetAbout, stderr)
	var (
		redisURL = redisFlag(fs, "Redis `address`: host:port[/db] or a redis:// or rediss:// URL; default $REDIS_URL, else 127.0.0.1:6379")
		prefix   = fs.String("prefix", "idem:", "the store's key prefix (redisstore.Options.Prefix)")
		lease    = fs.Duration("lease", 10*time.Second, "the store's `lease` (redisstore.Options.Lease), for the grace after a Redis restart")
		force    = fs.Bool("force", false, "forget a record whose lease is live too, fencing its owner")
		yes      = fs.Bool("yes", false, "forget without asking")
		names    = addRecordFlags(fs)
	)
	positional, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	scope, key, err := names.record(positional)
	if err != nil {
		return usageError(stderr, "forget", "%v", err)
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
	what := fmt.Sprintf("key %s in scope %s under prefix %s", quoteText(key), quoteText(scope), quoteText(*prefix))

	lctx, cancel := context.WithTimeout(ctx, forgetCallTimeout)
	rec, err := store.Lookup(lctx, scope, key)
	cancel()
	var summary string
	live := false
	switch {
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
		fmt.Fprintf(stderr, "idemkey forget: %s: %s\n", what, fmt.Sprintf(forgetLiveLease, shortDuration(rec.LeaseTTL)))
		return forgetRefused
	}
	if !*yes {
		fmt.Fprintf(stderr, "The record of %s: %s.\n", what, summary)
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
	return forgetNow(ctx, store, scope, key, *force, what, summary, stdout, stderr)
}

// forgetNow forgets the record and says how it went.
func forgetNow(ctx context.Context, store *redisstore.Store, scope, key string, force bool, what, summary string, stdout, stderr io.Writer) int {
	fctx, cancel := context.WithTimeout(ctx, forgetCallTimeout)
	defer cancel()
	var err error
	if force {
		err = store.ForceForget(fctx, scope, key)
	} else {
		err = store.Forget(fctx, scope, key)
	}
	var ip *redisstore.InProgressError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		fmt.Fprintf(stderr, "idemkey forget: no record for %s: never claimed, released after a failure, expired, or another scope or prefix\n", what)
		return 1
	case errors.As(err, &ip):
		fmt.Fprintf(stderr, "idemkey forget: %s: %s\n", what, fmt.Sprintf(forgetLiveLease, shortDuration(ip.LeaseLeft)))
		return forgetRefused
	case errors.Is(err, redisstore.ErrNotReplicated):
		fmt.Fprintf(stdout, "forgot the record of %s (%s), but %v\n", what, summary, err)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "idemkey forget: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "forgot the record of %s (%s): the next request with the key runs again\n", what, summary)
	return 0
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
