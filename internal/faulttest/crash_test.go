package faulttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// child is a crash-test server process.
type child struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed when the process has exited
}

func startChild(t *testing.T, v via, redisAddr, crashAt string, lease time.Duration) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "IDEMKEY_CHILD=1", "IDEMKEY_REDIS="+redisAddr,
		"IDEMKEY_CRASH_AT="+crashAt, "IDEMKEY_LEASE="+lease.String())
	if v == pipelined {
		cmd.Env = append(cmd.Env, "IDEMKEY_PIPELINED=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- s.Text()
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(c.done)
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "listening ")
		require.True(t, ok, "child said %q", l)
		c.url = "http://" + addr
	case <-time.After(20 * time.Second):
		t.Fatal("child did not start")
	}
	return c
}

type payResult struct {
	status   int
	replayed bool
	body     string
	charge   string
}

func pay(t *testing.T, url, key string) (*payResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/pay", strings.NewReader(`{"amount":500}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	r := &payResult{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(b)}
	var v struct{ Charge string }
	_ = json.Unmarshal(b, &v)
	r.charge = v.Charge
	return r, nil
}

// TestProcessCrash kills a real server process with SIGKILL at each point of
// a request's flow, then retries the request on a fresh process: in every
// case the provider charges exactly once and, once complete, every retry
// gets the same response.
func TestProcessCrash(t *testing.T) { processCrash(t, direct) }

// TestProcessCrashPipelined is TestProcessCrash with the children's stores
// on the auto-pipeliner.
func TestProcessCrashPipelined(t *testing.T) {
	redistest.Long(t)
	processCrash(t, pipelined)
}

func processCrash(t *testing.T, v via) {
	const lease = 500 * time.Millisecond
	points := []struct {
		at         string
		wantDedup  int  // provider calls answered from its dedupe record
		wantResume bool // the completing attempt resumed from the checkpoint
	}{
		{crashAfterClaim, 0, false},
		{crashAfterCharge, 1, false}, // the retry charges again with the same derived key: the provider dedupes
		{crashAfterCheckpoint, 0, true},
		{crashBeforeComplete, 0, true},
		{crashAfterComplete, 0, false}, // complete landed: the retry is a replay of the dead process's answer
	}
	srv := redistest.Start(t)
	prov := provider{srv.Client(t)}
	for _, p := range points {
		t.Run(p.at, func(t *testing.T) {
			key := "crash-" + p.at
			charges0, dedup0 := prov.counts(context.Background())

			doomed := startChild(t, v, srv.Addr(), p.at, lease)
			_, err := pay(t, doomed.url, key)
			require.Error(t, err, "the process died before answering")
			select {
			case <-doomed.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the doomed child did not die")
			}

			healthy := startChild(t, v, srv.Addr(), "", lease)
			var final *payResult
			require.Eventually(t, func() bool {
				r, err := pay(t, healthy.url, key)
				require.NoError(t, err)
				final = r
				return r.status != http.StatusConflict // 409 until the dead process's lease runs out
			}, 10*time.Second, 20*time.Millisecond)
			require.Equal(t, http.StatusCreated, final.status, final.body)
			require.NotEmpty(t, final.charge)
			if p.at == crashAfterComplete {
				require.True(t, final.replayed)
			} else {
				require.False(t, final.replayed)
				require.Contains(t, final.body, fmt.Sprintf(`"resumed":%t`, p.wantResume))
			}

			charges, dedup := prov.counts(context.Background())
			require.Equal(t, 1, charges-charges0, "charged exactly once")
			require.Equal(t, p.wantDedup, dedup-dedup0)

			for range 3 {
				again, err := pay(t, healthy.url, key)
				require.NoError(t, err)
				require.True(t, again.replayed)
				require.Equal(t, final.body, again.body)
			}
		})
	}
}
