//go:build unix

package event

import (
	"context"
	"os/exec"
	"syscall"
)

// shell returns the command for line, run by /bin/sh in a process group of
// its own, which ctx's end kills whole.
func shell(ctx context.Context, line string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return cmd
}
