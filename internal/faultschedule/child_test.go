package faultschedule

import "os"

// The test binary doubles as an instance of the test service
// (Config.Processes): started again with ChildEnv set, it serves instead
// of running the tests.
func init() {
	if os.Getenv(ChildEnv) != "" {
		os.Exit(ChildMain())
	}
}
