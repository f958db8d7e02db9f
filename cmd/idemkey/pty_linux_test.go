//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// openPTY opens a pseudo-terminal: what is written to master is read from
// tty, as typed.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("ptsname: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pts: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return m, s
}

// On a terminal the built binary asks, and forgets on "y" only.
func TestForgetBinaryAsksOnATerminal(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(t), redisstore.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: "k", Label: "POST /x"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 200}))

	for _, tc := range []struct {
		answer string
		code   int
	}{{"n\n", 3}, {"y\n", 0}} {
		master, tty := openPTY(t)
		_, err := master.WriteString(tc.answer) // typed ahead: the terminal holds the line until it is read
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(cctx, bin, "forget", "--redis", srv.Addr(), "--scope", "s", "k")
		var stdout, stderr bytes.Buffer
		cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = childEnv(), tty, &stdout, &stderr
		err = cmd.Run()
		cancel()
		require.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "%v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
		require.Contains(t, stderr.String(), "[y/N] ")
		_, err = store.Lookup(ctx, "s", "k")
		if tc.code == 0 {
			require.ErrorIs(t, err, redisstore.ErrNotFound)
			require.Contains(t, stdout.String(), `forgot the record of key "k"`)
		} else {
			require.NoError(t, err, "answered no: kept")
		}
	}
}
