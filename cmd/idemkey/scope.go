package main

import (
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/internal/httpcore"
)

// scopeAbout is the help of the flags that name a record, for inspect and
// forget.
const scopeAbout = `Records are per (scope, key); name the scope with exactly one of:

  --scope S           the scope itself, as the middleware's Options.Scope or
                      Request.Scope gave it ("" is a valid scope: --scope "")
  --bearer TOKEN      the scope 'idemkey serve' gives a caller with
                      Authorization: Bearer TOKEN (payments.Scope)
  --authorization V   the scope the middleware's default Options.Scope gives a
                      request with the header Authorization: V

KEY is the key as the client sent it in Idempotency-Key; an RFC 8941 quoted
form ("abc") is unquoted as the middleware does.`

// recordFlags are the flags that name a record: its scope, three ways.
type recordFlags struct {
	fs                   *flag.FlagSet
	scope, bearer, authz *string
}

func addRecordFlags(fs *flag.FlagSet) *recordFlags {
	return &recordFlags{
		fs:     fs,
		scope:  fs.String("scope", "", "the record's `scope`"),
		bearer: fs.String("bearer", "", "the bearer `token` of an 'idemkey serve' caller, instead of --scope"),
		authz:  fs.String("authorization", "", "an Authorization header `value`, for the default scope, instead of --scope"),
	}
}

// record returns the scope the flags name and the key of the positional
// argument, once the flags are parsed, or a usage error's message.
func (f *recordFlags) record(positional []string) (scope, key string, err error) {
	if len(positional) != 1 {
		return "", "", fmt.Errorf("want exactly one KEY, got %d arguments", len(positional))
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	n := 0
	for _, name := range []string{"scope", "bearer", "authorization"} {
		if set[name] {
			n++
		}
	}
	if n != 1 {
		return "", "", fmt.Errorf("name the scope with exactly one of --scope, --bearer or --authorization")
	}
	scope = *f.scope
	switch {
	case set["bearer"]:
		scope = payments.Scope(*f.bearer)
	case set["authorization"]:
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", *f.authz)
		if scope, err = httpcore.DefaultScope(r); err != nil {
			return "", "", fmt.Errorf("--authorization: %w", err)
		}
	}
	key = positional[0]
	if strings.HasPrefix(key, `"`) {
		if key, err = httpcore.ParseKey(key); err != nil {
			return "", "", fmt.Errorf("KEY: %w", err)
		}
	}
	return scope, key, nil
}
