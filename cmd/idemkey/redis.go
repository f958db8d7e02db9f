package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisEnv names the variable that gives the Redis URL when --redis is not set.
const redisEnv = "REDIS_URL"

// redisOptions parses the value of --redis (or $REDIS_URL): a redis://,
// rediss:// or unix:// URL, or host:port[/db] without a scheme, which is
// read as redis://host:port[/db]. Its errors never show a credential: they
// name the URL as redactURL shows it, and say what is wrong from a parse of
// the URL without its user and password (url.Parse quotes the whole URL,
// and go-redis's ParseURL parts of it).
func redisOptions(s string) (*redis.Options, error) {
	if s == "" {
		return nil, errors.New("--redis: empty; want host:port[/db] or a redis:// URL")
	}
	u := s
	if !strings.Contains(s, "://") {
		u = "redis://" + s
	}
	opts, err := redis.ParseURL(u)
	if err == nil {
		return opts, nil
	}
	why := "the user or password (before the last @) does not parse; escape @ as %40, / as %2F and % as %25 in them, and : as %3A in the user"
	if _, err := redis.ParseURL(redactAuthority(u)); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL it quotes
		}
		why = err.Error() + "; want host:port[/db] or redis://[user:password@]host:port[/db] (rediss:// for TLS)"
	}
	return nil, fmt.Errorf("--redis: %s: %s", redactURL(s), why)
}

// redacted is what stands for a credential in what the commands print.
const redacted = "xxxxx"

// redactAuthority returns the URL s with anything that may be a credential
// in its authority replaced by "xxxxx": everything between the scheme and
// the last '@' (a password may hold '/', '?' or '#' that the user did not
// escape, so an '@' in the path or query is taken for the end of a
// user-info too: over-redacting is safe), and a port that is not a number
// (the password of "redis://:password" without a host). s need not parse.
func redactAuthority(s string) string {
	prefix, rest, ok := strings.Cut(s, "://")
	if ok {
		prefix += "://"
	} else {
		prefix, rest = "", s
	}
	user := ""
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		user, rest = redacted+"@", rest[i+1:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	host, tail := rest[:end], rest[end:]
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		if port := host[i+1:]; strings.Trim(port, "0123456789") != "" {
			host = host[:i+1] + redacted
		}
	}
	return prefix + user + host + tail
}

// redactURL returns the URL s as the commands may print it: its authority
// redacted (redactAuthority), and the values of its query and its fragment
// too. s need not parse.
func redactURL(s string) string {
	s = redactAuthority(s)
	if i := strings.IndexByte(s, '#'); i >= 0 {
		s = s[:i+1] + redacted
	}
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		if name, _, ok := strings.Cut(p, "="); ok {
			params[i] = name + "=" + redacted
		}
	}
	return base + "?" + strings.Join(params, "&")
}

// redisFlag defines --redis on fs, and returns what to call after fs.Parse
// for its value: the flag's, else $REDIS_URL. The variable is not the
// flag's default, which usage messages print (-h, a bad flag), because it
// may hold a password.
func redisFlag(fs *flag.FlagSet, usage string) func() string {
	v := fs.String("redis", "", usage)
	return func() string {
		if *v != "" {
			return *v
		}
		return os.Getenv(redisEnv)
	}
}

// connect opens a client for the value of --redis (see redisOptions) and
// checks that the server answers. Its errors never show a credential.
func connect(ctx context.Context, rawURL string) (*redis.Client, error) {
	opts, err := redisOptions(rawURL)
	if err != nil {
		return nil, err
	}
	// Without it go-redis ignores context deadlines, and a hung Redis would
	// hold every request for its ReadTimeout.
	opts.ContextTimeoutEnabled = true
	// The auto-pipeliner gives a stalled connection up only at the read
	// timeout: keep it near the middleware's Timeout (2s).
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 2 * time.Second
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = opts.ReadTimeout // as go-redis does
	}
	rdb := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, scrubbed(fmt.Errorf("redis at %s: %w", addrName(opts.Addr), err), opts)
	}
	return rdb, nil
}

// scrubbedError is an error whose text has had credentials taken out; it
// unwraps to the original.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrubbed returns err with every occurrence of o's password in its text
// replaced by "xxxxx": a dial or handshake error could quote what it was
// given. A URL with a user-info of one part ("redis://token@host") gives
// go-redis a user name and no password: the user name is scrubbed then.
func scrubbed(err error, o *redis.Options) error {
	msg, secret := err.Error(), o.Password
	if secret == "" {
		secret = o.Username
	}
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, redacted)
	}
	return &scrubbedError{msg: msg, err: err}
}

// addrName is a server address as the commands print it: anything up to an
// '@' in it (a user-info where none belongs) redacted.
func addrName(addr string) string {
	if i := strings.LastIndexByte(addr, '@'); i >= 0 {
		return redacted + addr[i:]
	}
	return addr
}

// redisName describes the server a client talks to, without credentials.
func redisName(rdb *redis.Client) string { return optionsName(rdb.Options()) }

// optionsName describes the server of client options, without credentials.
func optionsName(o *redis.Options) string { return fmt.Sprintf("%s db %d", addrName(o.Addr), o.DB) }

// quietRedisLog drops go-redis's own log lines (a dial retried five times
// prints four), for the one-shot commands that report a failure to connect
// themselves.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// storeClient is what the store sends its scripts through: the client's
// shared auto-pipeliner, which batches concurrent requests' calls (see
// docs/pipelining.md), or with plain the client itself.
func storeClient(rdb *redis.Client, plain bool) (redis.Scripter, error) {
	if plain {
		return rdb, nil
	}
	ap, err := rdb.AutoPipeline()
	if err != nil {
		return nil, fmt.Errorf("auto-pipeliner: %w", err)
	}
	return ap, nil
}

// embedded starts an in-memory miniredis on a free loopback port.
func embedded() (*miniredis.Miniredis, *redis.Client, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, nil, fmt.Errorf("embedded redis: %w", err)
	}
	return mr, redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}), nil
}

// newFlagSet returns a flag set that reports errors to stderr and prints
// usage, a one-line synopsis and a description, for -h.
func newFlagSet(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: idemkey %s %s\n\n%s\nFlags:\n", name, synopsis, about)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and returns the exit code to stop with, if any:
// 0 for -h, 2 for a bad flag.
func parseFlags(fs *flag.FlagSet, args []string) (code int, stop bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}

// usageError reports a usage error for command name and returns 2.
func usageError(stderr io.Writer, name, format string, args ...any) int {
	fmt.Fprintf(stderr, "idemkey %s: %s\nRun 'idemkey %s -h' for usage.\n", name, fmt.Sprintf(format, args...), name)
	return 2
}
