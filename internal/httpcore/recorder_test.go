package httpcore

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSnapshot: the headers at commit are what is sent and stored, as a
// clone of the map would keep them: later changes to the map, to a value
// slice in place or by append, do not reach them; a nil value (no Date)
// stays nil; many headers spill out of the inline storage intact.
func TestSnapshot(t *testing.T) {
	for _, n := range []int{0, 1, 8, 9, 40} {
		t.Run(strconv.Itoa(n)+" headers", func(t *testing.T) {
			w := httptest.NewRecorder()
			var rec Recorder
			rec.init(w, 1<<20, map[string]bool{})
			h := rec.Header()
			for i := range n {
				h.Add("X-H"+strconv.Itoa(i), "a")
				if i%2 == 0 {
					h.Add("X-H"+strconv.Itoa(i), "b")
				}
			}
			h["Date"] = nil
			want := h.Clone()
			rec.WriteHeader(http.StatusCreated)
			_, _ = rec.Write([]byte("body"))

			// After the commit: changes of every kind.
			h.Set("X-Late", "1")
			if n > 0 {
				h["X-H0"][0] = "changed in place"
				h["X-H0"] = append(h["X-H0"], "appended")
				delete(h, "X-H1")
			}

			got := http.Header{}
			for _, f := range rec.storedHeader() {
				got[f.name] = f.vals
			}
			require.Equal(t, want, got, "stored")
			rec.flushHeld()
			require.Equal(t, http.StatusCreated, w.Code)
			sent := w.Result().Header
			vals, ok := sent["Date"]
			require.True(t, ok)
			require.Nil(t, vals, "a nil value stays nil: net/http sends no Date")
			delete(sent, "Date")
			delete(want, "Date")
			require.Equal(t, want, sent, "sent")

			// Encoded as the headers' map is.
			stored := http.Header{}
			for _, f := range rec.storedHeader() {
				stored[f.name] = f.vals
			}
			require.Equal(t, appendResponse(nil, stored, []byte("body"), false),
				appendFields(nil, rec.storedHeader(), []byte("body"), false))
		})
	}
}

// TestSnapshotAfterFlush: once the head is sent by a Flush, the map holds
// the sent values; a handler that changes one in place afterwards (which
// net/http ignores) changes nothing that is stored.
func TestSnapshotAfterFlush(t *testing.T) {
	w := httptest.NewRecorder()
	var rec Recorder
	rec.init(w, 1<<20, map[string]bool{})
	h := rec.Header()
	h.Set("X-A", "sent")
	rec.WriteHeader(http.StatusOK)
	_, _ = rec.Write([]byte("part"))
	rec.Flush()
	h["X-A"][0] = "changed in place after the flush"
	for _, f := range rec.storedHeader() {
		if f.name == "X-A" {
			require.Equal(t, []string{"sent"}, f.vals, "stored")
			return
		}
	}
	t.Fatal("X-A not stored")
}

// TestSnapshotLeavesOut: headers outer middleware set before the handler
// ran, and omitted ones, are sent but not stored.
func TestSnapshotLeavesOut(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("X-Request-Id", "outer")
	var rec Recorder
	rec.init(w, 1<<20, map[string]bool{"Set-Cookie": true})
	rec.Header().Set("Location", "/x")
	rec.Header().Set("Set-Cookie", "s=1")
	rec.Header()["set-cookie"] = []string{"s=2"} // not canonical: omitted too
	rec.WriteHeader(http.StatusCreated)
	var names []string
	for _, f := range rec.storedHeader() {
		names = append(names, f.name)
	}
	require.Equal(t, []string{"Location"}, names)
	require.Len(t, rec.snap.fields, 4, "the snapshot itself keeps them all")
}
