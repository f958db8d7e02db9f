//go:build linux

package storm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// openPTY opens a pseudo-terminal and returns its two ends; what is written
// to the terminal end (tty) is read from the other (master).
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

// The progress line goes to stderr when it is a terminal, once a second,
// and is cleared at the end; on a pipe, a file or /dev/null there is none.
func TestLoadProgressOnlyOnATerminal(t *testing.T) {
	srv, _ := newIdempotentServer(t)
	args := []string{"--url", srv.URL, "--rate", "20", "--duration", "2500ms", "--json"}

	master, tty := openPTY(t)
	var mu sync.Mutex
	var seen bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			seen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	require.True(t, isTerminal(tty))
	var stdout bytes.Buffer
	code := Command(t.Context(), args, &stdout, tty)
	require.Equal(t, 0, code)
	_ = tty.Close()
	_ = master.Close()
	<-done
	mu.Lock()
	out := seen.String()
	mu.Unlock()
	require.Regexp(t, `\rstorm: 1\.00s  operations \d+/50  attempts \d+  amplification [0-9.]+  p99 \S+  409s 0  errors 0`, out)
	require.GreaterOrEqual(t, strings.Count(out, "\rstorm: "), 2, "once a second: %q", out)
	require.True(t, strings.HasSuffix(out, "\r"), "the line is cleared at the end: %q", out)
	require.NotContains(t, stdout.String(), "storm: 1.00s", "stdout has the report only")

	// A pipe, a file and /dev/null are no terminals.
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = devnull.Close() })
	require.False(t, isTerminal(devnull))
	code = Command(t.Context(), args, io.Discard, w)
	require.Equal(t, 0, code)
	_ = w.Close()
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Empty(t, string(got), "nothing on a stderr that is not a terminal")
}
