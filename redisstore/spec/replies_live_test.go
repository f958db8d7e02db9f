package spec

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestReplyVectorsAreWhatTheScriptsReply: each reply vector is what its
// script replies today, on a real Redis, in the state the vector names;
// only the elements the vector lists as varying (a PTTL, which depends on
// the clock) may differ, and only in value. A script that changed a reply's
// shape fails here, as a decoder that changed fails TestVectorsDecode.
func TestReplyVectorsAreWhatTheScriptsReply(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	f := loadVectors(t, "replies.json")
	frozen := map[string]vector{}
	for family, vs := range f.Families {
		for _, v := range vs {
			frozen[family+": "+v.Name] = v
		}
	}
	ran := map[string]bool{}
	for _, s := range scenarios {
		id := s.family + ": " + s.name
		ran[id] = true
		t.Run(id, func(t *testing.T) {
			v, ok := frozen[id]
			require.True(t, ok, "no vector for the scenario %q", id)
			want, err := parseRESP(v.bytes(t))
			require.NoError(t, err)
			got, err := s.reply(ctx, t, rdb)
			require.NoError(t, err)
			if w, ok := want.([]any); ok {
				g, ok := got.([]any)
				require.True(t, ok, "%#v", got)
				require.Len(t, g, len(w))
				for _, i := range v.Varies {
					require.IsType(t, w[i], g[i], "element %d", i)
					g[i] = w[i]
				}
			}
			require.Equal(t, want, got)
		})
	}
	for id := range frozen {
		require.True(t, ran[id], "no scenario makes the reply vector %q", id)
	}
}
