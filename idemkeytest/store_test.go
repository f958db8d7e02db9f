package idemkeytest_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/idemkey/idemkey/internal/syncbuf"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/idemkeytest"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

type lockedBuffer = syncbuf.Buffer

// logRecorder is a test whose Logf lines are also sent on lines.
type logRecorder struct {
	testing.TB
	lines chan string
}

func (r *logRecorder) Logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.TB.Log(line)
	select {
	case r.lines <- line:
	default:
	}
}

// NewStore's store logs to the test, never to slog's default logger: a
// user's test output stays free of what the store says, here the start-up
// check's warning that miniredis cannot tell its maxmemory-policy (which
// RequireNoEviction asks for).
func TestNewStoreLogsToTheTest(t *testing.T) {
	var global lockedBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&global, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	rec := &logRecorder{TB: t, lines: make(chan string, 16)}
	store, _ := idemkeytest.NewStore(rec, redisstore.Options{RequireNoEviction: true})
	c, err := store.Claim(context.Background(), redisstore.Request{Scope: "s", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for found := false; !found; {
		select {
		case line := <-rec.lines:
			found = strings.Contains(line, "idemkeytest: store: level=WARN msg=\"redisstore: maxmemory-policy:")
		case <-timeout:
			t.Fatal("the store's start-up check logged nothing to the test")
		}
	}
	if s := global.String(); s != "" {
		t.Errorf("the store logged to slog's default logger:\n%s", s)
	}
}

// NewStore's store does not check its own embedded miniredis, which
// neither evicts nor persists by design: a kit test opens with no warning
// about "managed Redis?" (it used to, on every run).
func TestNewStoreDoesNotCheckItsOwnMiniredis(t *testing.T) {
	rec := &logRecorder{TB: t, lines: make(chan string, 16)}
	store, _ := idemkeytest.NewStore(rec, redisstore.Options{})
	if !store.Options().NoStartupCheck {
		t.Fatal("the store checks miniredis's eviction policy and persistence, and warns that it cannot read them")
	}
	c, err := store.Claim(context.Background(), redisstore.Request{Scope: "s", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-rec.lines:
		t.Errorf("the store logged: %s", line)
	default:
	}
}

// The minimal Config (Path, Body, SideEffects) passes on httpmw with a
// shared scope: without credentials in Config.Header the default scope
// would refuse every request.
func TestRunMinimalConfig(t *testing.T) {
	store, _ := idemkeytest.NewStore(t, redisstore.Options{})
	orders := &counter{}
	h := httpmw.New(store, httpmw.Options{Scope: httpmw.SharedScope("tests")})(create(orders, "orders"))
	idemkeytest.Run(t, h, idemkeytest.Config{
		Path:        "/v1/orders",
		Body:        []byte(`{"sku":"book","qty":1}`),
		SideEffects: orders.Count,
	})
	if n := orders.Count(); n != 3 {
		t.Errorf("%d orders, want 3 (concurrency, the fingerprint probes' own key and lost-response)", n)
	}
}

// The ttl check reads every master of a cluster.
func TestRunTTLOnACluster(t *testing.T) {
	rdb := redistest.StartCluster(t, 3).Client(t)
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: "kit:"})
	if err != nil {
		t.Fatal(err)
	}
	app := newApp(store)
	var report bytes.Buffer
	idemkeytest.Run(t, app, idemkeytest.Config{
		Path:        "/v1/orders",
		Body:        []byte(`{"sku":"book","qty":1}`),
		Header:      http.Header{"Authorization": {"Bearer alice"}},
		SideEffects: app.orders.Count,
		Redis:       rdb,
		Prefix:      "kit:",
		Report:      &report,
	})
	if !strings.Contains(report.String(), "  - ok ttl: ") {
		t.Errorf("no passing ttl check in the report:\n%s", report.String())
	}
}
