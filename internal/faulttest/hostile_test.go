package faulttest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// rawRequest writes a request by hand on a fresh connection, sends only
// part of the body if told to, and returns the status line the server
// answers with.
func rawRequest(t *testing.T, url string, head string, body string, then func(net.Conn)) string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, head+"\r\n"+body)
	require.NoError(t, err)
	if then != nil {
		then(conn)
	}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	status, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(status)
}

func TestHostileBodies(t *testing.T) { hostileBodies(t, direct) }

// TestHostileBodiesPipelined is TestHostileBodies with the store on the
// auto-pipeliner.
func TestHostileBodiesPipelined(t *testing.T) {
	redistest.Long(t)
	hostileBodies(t, pipelined)
}

func hostileBodies(t *testing.T, v via) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a := newApp(t, v.scripter(t, rdb), redisstore.Options{}, httpmw.Options{BodyTimeout: 300 * time.Millisecond, MaxBodyBytes: 64 << 10}, nil)
	ctx := context.Background()
	dbsize := func() int64 {
		n, err := rdb.DBSize(ctx).Result()
		require.NoError(t, err)
		return n
	}
	head := func(length int) string {
		return fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: hostile-%d\r\nContent-Length: %d\r\n", length, length)
	}

	t.Run("slow-loris body times out with 408 and holds no key", func(t *testing.T) {
		before := dbsize()
		start := time.Now()
		status := rawRequest(t, a.srv.URL, head(100), `{"amount":`, nil) // then silence
		require.Contains(t, status, "408")
		// The bound is the behaviour: BodyTimeout (300ms) ends a body
		// that never comes (the request would wait for the test's end);
		// 5s is 16x.
		require.Less(t, time.Since(start), 5*time.Second)
		require.Equal(t, before, dbsize())
		require.Zero(t, a.total())
	})

	t.Run("truncated body gets 400 and holds no key", func(t *testing.T) {
		before := dbsize()
		status := rawRequest(t, a.srv.URL, head(101), `{"amount":`, func(c net.Conn) {
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
		})
		require.Contains(t, status, "400")
		require.Equal(t, before, dbsize())
		require.Zero(t, a.total())
	})

	t.Run("huge and long numbers are exact, not rounded", func(t *testing.T) {
		for i, pair := range [][2]string{
			{`{"amount":123456789012345678901234567890}`, `{"amount":123456789012345678901234567891}`},
			{`{"amount":1e999999999}`, `{"amount":1e999999998}`},
			{`{"amount":0.1000000000000000000000000001}`, `{"amount":0.1}`},
		} {
			key := fmt.Sprint("numbers-", i)
			code, _, _ := send(t, a.srv.URL, key, pair[0])
			require.Equal(t, http.StatusCreated, code)
			code, _, _ = send(t, a.srv.URL, key, pair[1])
			require.Equal(t, http.StatusUnprocessableEntity, code, "%s and %s must differ", pair[0], pair[1])
			code, replayed, _ := send(t, a.srv.URL, key, strings.Replace(pair[0], `"amount":`, `"amount" : `, 1))
			require.Equal(t, http.StatusCreated, code)
			require.True(t, replayed)
		}
	})

	t.Run("depth bombs and duplicate members are refused before any claim", func(t *testing.T) {
		before, runs := dbsize(), a.total()
		for _, body := range []string{
			strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
			strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000),
			`{"amount":1,"amount":2}`,
			`{"a":{"b":1,"b":1}}`,
			`{"amount":1}{"amount":2}`,
			"{\"amount\":\"\xff\"}",
		} {
			code, _, b := send(t, a.srv.URL, "bomb", body)
			require.Equal(t, http.StatusBadRequest, code)
			require.Contains(t, b, "json-malformed")
		}
		require.Equal(t, before, dbsize())
		require.Equal(t, runs, a.total())
	})
}

// TestKeysBuiltToCollide sends keys made of Redis key-space and glob
// characters, in two scopes: each is its own record.
func TestKeysBuiltToCollide(t *testing.T) {
	mr := miniredis.RunT(t)
	a := newApp(t, redis.NewClient(&redis.Options{Addr: mr.Addr()}), redisstore.Options{}, httpmw.Options{}, nil)
	keys := []string{"{tag}", "}tag{", "{tag}x", "a:lease", "a", "idem:{x}", "*", "?", "[a-z]*", `"a b"`, `"\\"`, `"{"`, "a:b:c", "a%2Fb"}
	post := func(auth, key, body string) (int, bool, string) {
		req, _ := http.NewRequest(http.MethodPost, a.srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b)
	}
	first := map[string]string{}
	for _, auth := range []string{"Bearer alice", "Bearer bob"} {
		for i, k := range keys {
			body := fmt.Sprintf(`{"n":%d,"auth":%q}`, i, auth)
			code, replayed, b := post(auth, k, body)
			require.Equal(t, http.StatusCreated, code, "%s %q: %s", auth, k, b)
			require.False(t, replayed, "%s %q collided with an earlier key", auth, k)
			first[auth+"|"+k] = b
		}
	}
	for _, auth := range []string{"Bearer alice", "Bearer bob"} {
		for i, k := range keys {
			body := fmt.Sprintf(`{"n":%d,"auth":%q}`, i, auth)
			code, replayed, b := post(auth, k, body)
			require.Equal(t, http.StatusCreated, code)
			require.True(t, replayed)
			require.Equal(t, first[auth+"|"+k], b)
		}
	}
	require.Equal(t, 2*len(keys), a.total(), "each key ran once per scope")
}

// TestScopeIsolation: whatever key it sends, a request in one scope cannot
// read, replay, block or release another scope's record.
func TestScopeIsolation(t *testing.T) {
	mr := miniredis.RunT(t)
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	var a *app
	a = newApp(t, redis.NewClient(&redis.Options{Addr: mr.Addr()}), redisstore.Options{}, httpmw.Options{}, func(w http.ResponseWriter, r *http.Request) {
		n := a.count(httpmw.Key(r.Context()))
		if r.Header.Get("Authorization") == "Bearer alice" && r.URL.Path == "/slow" {
			started <- struct{}{}
			<-gate
		}
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable) // releases the key: whose?
			return
		}
		fmt.Fprintf(w, "run %d for %s", n, r.Header.Get("Authorization"))
	})
	do := func(auth, path, key string) (int, bool, string) {
		req, _ := http.NewRequest(http.MethodPost, a.srv.URL+path, strings.NewReader("x"))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b)
	}

	// Alice's request is in progress: Bob with her key is not blocked.
	done := make(chan string)
	go func() { _, _, b := do("Bearer alice", "/slow", "shared"); done <- b }()
	<-started
	code, replayed, body := do("Bearer bob", "/slow", "shared")
	require.Equal(t, http.StatusOK, code)
	require.False(t, replayed)
	require.Contains(t, body, "Bearer bob")
	code, _, _ = do("Bearer alice", "/slow", "shared")
	require.Equal(t, http.StatusConflict, code, "alice is still blocked by her own request")

	// Bob failing with the same key releases only his own record.
	code, _, _ = do("Bearer bob", "/fail", "shared-2")
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, _, _ = do("Bearer alice", "/slow", "shared")
	require.Equal(t, http.StatusConflict, code)
	close(gate)
	aliceBody := <-done

	// Completed: Bob with her key and another body neither replays hers nor gets 422.
	code, replayed, body = do("Bearer alice", "/slow", "shared")
	require.Equal(t, http.StatusOK, code)
	require.True(t, replayed)
	require.Equal(t, aliceBody, body)
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL+"/slow", strings.NewReader("something else"))
	req.Header.Set("Authorization", "Bearer bob")
	req.Header.Set("Idempotency-Key", "shared")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "bob's own record, bob's own mismatch")
	_, _, body = do("Bearer mallory", "/slow", "shared")
	require.NotEqual(t, aliceBody, body)
	require.Contains(t, body, "Bearer mallory")
}

// TestReplayHygiene: replays never carry cookies or headers of another
// request, and their bodies are byte-identical even when binary or gzipped.
func TestReplayHygiene(t *testing.T) {
	mr := miniredis.RunT(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(bytes.Repeat([]byte("idempotent "), 500))
	require.NoError(t, zw.Close())
	var a *app
	a = newApp(t, redis.NewClient(&redis.Options{Addr: mr.Addr()}), redisstore.Options{}, httpmw.Options{}, func(w http.ResponseWriter, r *http.Request) {
		a.count(httpmw.Key(r.Context()))
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "s3cret"})
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "private")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(gz.Bytes())
	})
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, a.srv.URL, nil)
		req.Header.Set("Idempotency-Key", "gz")
		resp, err := client.Do(req)
		require.NoError(t, err)
		return resp
	}
	read := func(r *http.Response) []byte {
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		return b
	}
	first := get()
	firstBody := read(first)
	require.Equal(t, gz.Bytes(), firstBody)
	require.NotEmpty(t, first.Header.Get("Set-Cookie"))
	for range 2 {
		again := get()
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
		require.Equal(t, firstBody, read(again), "byte-identical gzip body")
		require.Equal(t, "gzip", again.Header.Get("Content-Encoding"))
		require.Equal(t, "private", again.Header.Get("Cache-Control"))
		require.Empty(t, again.Header.Get("Set-Cookie"))
		require.NotEqual(t, first.Header.Get("X-Request-Id"), again.Header.Get("X-Request-Id"),
			"the outer middleware's per-request header is this request's, not the stored one")
	}
	require.Equal(t, 1, a.total())
}

// TestHandlerMaxDuration: a handler that outlives the store's MaxDuration is
// cancelled and its key released, instead of holding it for ever.
func TestHandlerMaxDuration(t *testing.T) { handlerMaxDuration(t, direct) }

// TestHandlerMaxDurationPipelined is TestHandlerMaxDuration with the store
// on the auto-pipeliner.
func TestHandlerMaxDurationPipelined(t *testing.T) {
	redistest.Long(t)
	handlerMaxDuration(t, pipelined)
}

func handlerMaxDuration(t *testing.T, v via) {
	srv := redistest.Start(t)
	causes := make(chan error, 2)
	var a *app
	a = newApp(t, v.scripter(t, srv.Client(t)), redisstore.Options{Lease: 300 * time.Millisecond, MaxDuration: 200 * time.Millisecond}, httpmw.Options{},
		func(w http.ResponseWriter, r *http.Request) {
			if a.count(httpmw.Key(r.Context())) == 1 {
				<-r.Context().Done() // stuck until cut off
				causes <- context.Cause(r.Context())
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
	code, _, _ := send(t, a.srv.URL, "stuck", "{}")
	require.Equal(t, http.StatusServiceUnavailable, code)
	// Cut off by MaxDuration: the cause, not the time, says so.
	require.True(t, errors.Is(<-causes, redisstore.ErrMaxDuration))
	code, replayed, _ := send(t, a.srv.URL, "stuck", "{}")
	require.Equal(t, http.StatusCreated, code, "the key was released")
	require.False(t, replayed)
}
