package redistest

import (
	"flag"
	"strconv"
)

// Parallel sets the default of go test's -parallel (how many t.Parallel
// tests run at once; GOMAXPROCS by default) to n, for a package whose
// parallel tests spend their time waiting on the servers they start
// (gossip, failovers, leases running out) rather than on the CPU. A
// -parallel given on the command line wins. Call it from TestMain, before
// m.Run; it parses the command line if that is not done yet.
func Parallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && flag.Lookup("test.parallel") != nil {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
