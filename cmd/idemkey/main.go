// Command idemkey shows idempotency keys at work, and checks them.
//
//	idemkey demo                  a retry storm against the example payments API on embedded Redis
//	idemkey serve [flags]         the example payments API, protected by ginmw
//	idemkey storm --url URL ...   a retry-storm load tester for any Idempotency-Key endpoint
//	idemkey check HISTORY...      re-judges the history a storm wrote (--history), offline
//	idemkey inspect [flags] KEY   the idempotency record of one key
//	idemkey ls [flags]            the records under a prefix, filtered by state and age
//	idemkey forget [flags] KEY    forgets one key's record, so that it runs again
//	idemkey verify --url URL ...  the idempotency verification list, run against any endpoint
//	idemkey doctor [flags]        checks a Redis for use as an idempotency store
//	idemkey dict train [flags] PATH...  a zstd dictionary for stored responses, from sample bodies
//
// Run "idemkey <command> -h" for a command's flags. Every command exits 0
// on success and 2 on a usage error; see each command for its other codes.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/internal/verify"
	"github.com/idemkey/idemkey/storm"
)

const usage = `idemkey: retried requests, made safe.

Usage:
  idemkey demo [flags]              run a retry storm against the payments API on embedded Redis
  idemkey serve [flags]             serve the example payments API (examples/payments)
  idemkey storm --url URL [flags]   retry-storm any HTTP endpoint that takes Idempotency-Key
  idemkey check [flags] HISTORY...  re-judge the history a storm wrote (--history), offline
  idemkey inspect [flags] KEY       show the idempotency record of a key
  idemkey ls [flags]                list the records under a prefix (--state, --older, --expired)
  idemkey forget [flags] KEY        forget the record of a key, so that its next request runs again
  idemkey verify --url URL [flags]  check one endpoint's idempotency contract, clause by clause
  idemkey doctor [flags]            check a Redis for use as an idempotency store
  idemkey dict train [flags] PATH   build a dictionary for compressing stored responses

Run 'idemkey <command> -h' for the flags of a command.
`

func main() {
	gin.SetMode(gin.ReleaseMode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command named by args[0] and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "demo":
		return demo(ctx, rest, stdout, stderr)
	case "serve":
		return serve(ctx, rest, stdout, stderr)
	case "storm":
		return storm.Command(ctx, rest, stdout, stderr)
	case "check":
		return storm.CheckCommand(rest, stdout, stderr)
	case "inspect":
		return inspect(ctx, rest, stdout, stderr)
	case "ls":
		return ls(ctx, rest, stdout, stderr)
	case "forget":
		return forget(ctx, rest, stdout, stderr)
	case "verify":
		return verify.Command(ctx, rest, stdout, stderr)
	case "doctor":
		return doctor(ctx, rest, stdout, stderr)
	case "dict":
		return dictCommand(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "idemkey: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}
