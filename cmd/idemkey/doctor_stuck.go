package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkey/idemkey/redisstore"
)

const (
	stuckListed = 5                // the oldest stuck records doctor lists
	stuckScan   = 10 * time.Second // doctor's scan for them, at most
)

// stuckRecord is a record nobody holds, as doctor lists it.
type stuckRecord struct {
	Name          string     `json:"name"`
	Server        string     `json:"server"`
	State         string     `json:"state"` // started (its lease ran out) or released
	Attempt       int        `json:"attempt"`
	Label         string     `json:"label"`
	RecoveryPoint string     `json:"recovery_point,omitempty"`
	CreatedAt     *time.Time `json:"created_at,omitempty"`
	AgeMS         *int64     `json:"age_ms,omitempty"`
	// Forget is the command that clears it, naming the record by its name
	// (forget --name), quoted for a POSIX shell.
	Forget string `json:"forget"`
}

// stuckReport is doctor's finding of stuck records (--json: "stuck").
type stuckReport struct {
	// Found is how many records nobody holds the scan found.
	Found int `json:"found"`
	// Oldest are the oldest of them, first claimed first.
	Oldest []stuckRecord `json:"oldest"`
	// Partial is set when the scan stopped before the end (its time ran out).
	Partial bool `json:"partial,omitempty"`
	// Error is why the scan failed, if it did.
	Error string `json:"error,omitempty"`
	// CredentialsLeftOut is set when the Redis URL had a user or password,
	// which the forget lines leave out.
	CredentialsLeftOut bool `json:"credentials_left_out,omitempty"`
}

// findStuck scans the store for records nobody holds (started records
// whose lease ran out, and released ones) and keeps the oldest: at most
// stuckListed at any time, however many there are. url is doctor's Redis
// URL, for the forget lines.
func findStuck(ctx context.Context, store *redisstore.Store, url, prefix string) *stuckReport {
	rep := &stuckReport{Oldest: []stuckRecord{}}
	redisArg, withCredentials := redisArgument(url)
	rep.CredentialsLeftOut = withCredentials
	sctx, cancel := context.WithTimeout(ctx, stuckScan)
	defer cancel()
	now := time.Now()
	_, err := store.Scan(sctx, redisstore.ScanOptions{LeaseExpired: true}, func(sc *redisstore.Scanned) error {
		if sc.Record == nil {
			return nil // the in-progress check counts what it can; ls lists the rest
		}
		rep.Found++
		e := newLSEntry(prefix, sc, now)
		r := stuckRecord{Name: e.Name, Server: e.Server, State: e.State, Attempt: e.Attempt, Label: e.Label,
			RecoveryPoint: e.RecoveryPoint, CreatedAt: e.CreatedAt, AgeMS: e.AgeMS,
			Forget: fmt.Sprintf("idemkey forget --redis %s --prefix %s --name %s", shellQuote(redisArg), shellQuote(prefix), shellQuote(e.Name))}
		i, _ := slices.BinarySearchFunc(rep.Oldest, r, olderFirst)
		if i < stuckListed {
			rep.Oldest = slices.Insert(rep.Oldest, i, r)
			if len(rep.Oldest) > stuckListed {
				rep.Oldest = rep.Oldest[:stuckListed]
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		rep.Partial = true
	case err != nil:
		rep.Error = err.Error()
	}
	return rep
}

// olderFirst orders stuck records by their first claim, unknown times last.
func olderFirst(a, b stuckRecord) int {
	switch {
	case a.CreatedAt == nil && b.CreatedAt == nil:
		return 0
	case a.CreatedAt == nil:
		return 1
	case b.CreatedAt == nil:
		return -1
	}
	return a.CreatedAt.Compare(*b.CreatedAt)
}

// writeText prints the finding under doctor's checks.
func (r *stuckReport) writeText(w io.Writer) {
	switch {
	case r.Error != "":
		fmt.Fprintf(w, "stuck records: the scan failed: %s\n", r.Error)
		return
	case r.Found == 0 && !r.Partial:
		return
	}
	partial := ""
	if r.Partial {
		partial = fmt.Sprintf(" (the scan stopped after %s)", stuckScan)
	}
	fmt.Fprintf(w, "stuck records: %d nobody holds%s, their runs ended without an outcome; a retry with the key takes each over "+
		"and resumes from its recovery point. The oldest %d:\n", r.Found, partial, len(r.Oldest))
	for _, s := range r.Oldest {
		line := fmt.Sprintf("  %s  %s, attempt %d, label %s", plainName(s.Name), s.State, s.Attempt, quoteText(s.Label))
		if s.RecoveryPoint != "" {
			line += ", recovery point " + quoteText(s.RecoveryPoint)
		}
		if s.AgeMS != nil {
			line += ", first claimed " + shortDuration(time.Duration(*s.AgeMS)*time.Millisecond) + " ago"
		}
		fmt.Fprintf(w, "%s\n    to forget it: %s\n", line, s.Forget)
	}
	fmt.Fprintln(w, "  Forgotten, a record's key runs again as attempt 1 on its next request, where a retry would take it over "+
		"and resume from its recovery point; 'idemkey ls --expired' lists them all.")
	if r.CredentialsLeftOut {
		fmt.Fprintln(w, "  The --redis URLs above leave out the user and password: add them, or set REDIS_URL and drop --redis.")
	}
}

// redisArgument returns a value of --redis that reaches the server of the
// URL u without its user, password or query (a db other than 0 is kept),
// and whether u had a user or password. u is a URL redisOptions accepts.
func redisArgument(u string) (arg string, withCredentials bool) {
	o, err := redisOptions(u)
	if err != nil {
		return redactURL(u), false
	}
	withCredentials = o.Username != "" || o.Password != ""
	if o.Network == "unix" {
		arg = "unix://" + o.Addr
		if o.DB != 0 {
			arg += "?db=" + strconv.Itoa(o.DB)
		}
		return arg, withCredentials
	}
	scheme := "redis"
	if o.TLSConfig != nil {
		scheme = "rediss"
	}
	return fmt.Sprintf("%s://%s/%d", scheme, addrName(o.Addr), o.DB), withCredentials
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == ':' || c == '-' || c == '_' || c == '.' || c == '/') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	if s == "" {
		return "''"
	}
	return s
}
