package grpcmw_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/internal/syncbuf"
)

// During an outage every call gets Unavailable, and the log says it once
// per cause within the minute, not once per call.
func TestOutageIsLoggedOncePerCause(t *testing.T) {
	var log syncbuf.Buffer
	var runs counter
	h := start(t, charge(&runs), setup{server: grpcmw.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}})
	ctx := ctxT(t, 30*time.Second)
	in := req(t, map[string]any{"amount": 1})
	require.NoError(t, h.call(ctx, "k-before", in).err)
	h.redis.Stop()
	for i := range 10 {
		a := h.call(ctx, fmt.Sprint("k-down-", i), in)
		require.Equal(t, codes.Unavailable, status.Code(a.err), "%v", a.err)
	}
	out := log.String()
	require.Equal(t, 1, strings.Count(out, `msg="grpcmw: store unavailable"`), out)
	require.Contains(t, out, "cause=refused")
}
