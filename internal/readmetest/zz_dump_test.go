package readmetest

import "testing"

func TestDumpWallclock(t *testing.T) {
	for _, f := range scanRepoWallclock(t) {
		t.Log(f.String())
	}
}
