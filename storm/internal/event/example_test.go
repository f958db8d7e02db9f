//go:build unix

package event_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkey/idemkey/storm/internal/event"
)

// A command at a time of the run, as --at gives it: its exit status and
// output are in its Result once the runner stops.
func ExampleStart() {
	cmd, err := event.Parse("0s=echo flag flipped; exit 2")
	if err != nil {
		panic(err)
	}
	ended := make(chan struct{})
	r := event.Start(time.Now(), []event.Command{cmd}, event.Options{OnEnd: func(event.Result) { close(ended) }})
	<-ended // the run goes on meanwhile
	res := r.Stop(context.Background())[0]
	fmt.Printf("%s: exit %d, %q\n", res.Command, res.ExitCode, res.Output)
	// Output:
	// 0s=echo flag flipped; exit 2: exit 2, "flag flipped\n"
}
