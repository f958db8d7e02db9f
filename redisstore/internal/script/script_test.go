package script

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/observe"
)

// replyError is an error reply from Redis, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

func TestIsFinal(t *testing.T) {
	for _, msg := range []string{
		"MOVED 3999 127.0.0.1:6381",
		"ASK 3999 127.0.0.1:6381",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down",
		"LOADING Redis is loading the dataset in memory",
	} {
		err := replyError(msg)
		require.False(t, IsFinal(err), msg)
		require.False(t, IsFinal(errors.Join(errors.New("redisstore: complete"), err)), msg)
	}
	require.True(t, IsFinal(replyError("WRONGTYPE Operation against a key holding the wrong kind of value")))
	require.False(t, IsFinal(errors.New("dial tcp: connection refused")), "not a reply")
	require.False(t, IsFinal(context.DeadlineExceeded))
}

// fake is a client that answers EVALSHA with reply and err once release is
// closed (at once if it is nil). It does not end calls at their deadline.
type fake struct {
	redis.Scripter
	reply   any
	err     error
	release chan struct{}
}

func (f *fake) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	if f.release != nil {
		<-f.release
	}
	return redis.NewCmdResult(f.reply, f.err)
}

var test = New("test", "return 1", false)

func TestRunLost(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		reply    any
		err      error
		wantLost bool
	}{
		{"an answer", int64(1), nil, false},
		{"a final error reply", nil, replyError("WRONGTYPE Operation against a key"), false},
		{"no answer", nil, errors.New("read tcp: connection reset by peer"), true},
		{"a redirection", nil, replyError("MOVED 3999 127.0.0.1:6381"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRunner(Config{Client: &fake{reply: tc.reply, err: tc.err}})
			require.NoError(t, err)
			var lost atomic.Int32
			reply, err := r.Run(ctx, test, []string{"k"}, LostFunc(func() { lost.Add(1) }))
			require.Equal(t, tc.reply, reply)
			require.Equal(t, tc.err, err)
			require.EqualValues(t, map[bool]int32{true: 1}[tc.wantLost], lost.Load(), "lost is called before Run returns")
		})
	}

	t.Run("a call given up at the deadline, answered later", func(t *testing.T) {
		f := &fake{reply: int64(1), release: make(chan struct{})}
		r, err := NewRunner(Config{Client: f})
		require.NoError(t, err)
		lost := make(chan struct{})
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err = r.Run(cctx, test, []string{"k"}, LostFunc(func() { close(lost) }))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		select {
		case <-lost:
			t.Fatal("lost called before the call ended")
		default:
		}
		close(f.release)
		select {
		case <-lost: // the claim took effect, and nobody uses it
		case <-time.After(10 * time.Second):
			t.Fatal("lost not called once the late answer came")
		}
	})

	t.Run("a client that ends calls at their deadline", func(t *testing.T) {
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		r, err := NewRunner(Config{Client: c})
		require.NoError(t, err)
		require.True(t, r.bounded)
		var lost atomic.Int32
		reply, err := r.Run(ctx, test, nil, LostFunc(func() { lost.Add(1) }))
		require.NoError(t, err)
		require.EqualValues(t, 1, reply)
		mr.Close()
		_, err = r.Run(ctx, test, nil, LostFunc(func() { lost.Add(1) }))
		require.Error(t, err)
		require.EqualValues(t, 1, lost.Load(), "a call that reached no Redis may have run: lost is called")
	})
}

func TestRunObserves(t *testing.T) {
	var calls []observe.Call
	rec := &recorder{calls: &calls}
	down := errors.New("down")
	r, err := NewRunner(Config{Client: &fake{err: down}, Observer: rec})
	require.NoError(t, err)
	_, err = r.Run(context.Background(), New("claim", "return 1", true), []string{"k"}, nil)
	require.ErrorIs(t, err, down)
	require.Len(t, calls, 1)
	require.Equal(t, "claim", calls[0].Script)
	require.Equal(t, down, calls[0].Err)
	require.False(t, calls[0].Start.IsZero())
}

type recorder struct{ calls *[]observe.Call }

func (r *recorder) Event(context.Context, *observe.Event)    {}
func (r *recorder) Redis(_ context.Context, c *observe.Call) { *r.calls = append(*r.calls, *c) }

func TestNewRunnerReplicas(t *testing.T) {
	_, err := NewRunner(Config{Client: &redis.Ring{}, Replicas: 1})
	require.ErrorContains(t, err, "Replicas needs a *redis.Client or *redis.ClusterClient, not *redis.Ring")
	_, err = NewRunner(Config{Client: &fake{}})
	require.NoError(t, err, "no Replicas, any client")
}

// health is a Health whose Down closes when down is closed.
type health struct {
	down    chan struct{}
	refusal atomic.Pointer[error]
	ended   chan error
}

func (h *health) Ended(err error)       { h.ended <- err }
func (h *health) Down() <-chan struct{} { return h.down }
func (h *health) Refusal() error {
	if p := h.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

// TestRunHealth: Health is told how every call ends, also one Run stopped
// waiting for; a call that may be handed back stops waiting when Health
// finds Redis down, and Run returns the refusal, while one without a lost
// hook waits for its answer.
func TestRunHealth(t *testing.T) {
	ctx := context.Background()
	refused := errors.New("dial tcp: connect: connection refused")
	f := &fake{reply: int64(1), release: make(chan struct{})}
	h := &health{down: make(chan struct{}), ended: make(chan error, 4)}
	r, err := NewRunner(Config{Client: f, Health: h})
	require.NoError(t, err)

	got := make(chan error, 1)
	lost := make(chan struct{}, 1)
	go func() {
		_, err := r.Run(ctx, test, []string{"k"}, LostFunc(func() { lost <- struct{}{} }))
		got <- err
	}()
	h.refusal.Store(&refused)
	close(h.down)
	select {
	case err := <-got:
		require.ErrorIs(t, err, refused)
	case <-time.After(10 * time.Second):
		t.Fatal("Run waited on after Redis was found down")
	}
	close(f.release) // the call ends after all: Health hears it, and lost is called
	require.NoError(t, <-h.ended)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("a call given up on ended with an answer, and lost was not called")
	}

	reply, err := r.Run(ctx, test, []string{"k"}, nil) // no lost hook: not cut short
	require.NoError(t, err)
	require.Equal(t, int64(1), reply)
	require.NoError(t, <-h.ended)
}
