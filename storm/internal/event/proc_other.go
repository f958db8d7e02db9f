//go:build !unix

package event

import (
	"context"
	"os/exec"
)

// shell returns the command for line, run by cmd /C, which ctx's end
// kills.
func shell(ctx context.Context, line string) *exec.Cmd {
	return exec.CommandContext(ctx, "cmd", "/C", line)
}
