//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr puts the server in its own process group, so signals reach any
// child it forks. Pdeathsig is Linux-only, so elsewhere a server can outlive a
// test binary that is killed before its cleanups run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
