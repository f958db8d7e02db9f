package record

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDerivedKey: derived keys are handed to providers, which keep them:
// the format never changes (these were made by Lease.DerivedKey before it
// moved here), and the lengths keep the fields apart.
func TestDerivedKey(t *testing.T) {
	require.Equal(t, "e-DZYgRQPWxK3CBVjGCufoGmeROm9fP8", DerivedKey("idem:", "acct_1", "order-42", "charge"))
	require.Equal(t, "7DnybwctS89g5WlUMjwVJ4HoawnVKgud", DerivedKey("idem:", "", "k", ""))
	require.Equal(t, "6uGUtmQH4UXJMKYwSK5MSXf9TpACZ_cH", DerivedKey("idem:", "acct_1o", "rder-42", "charge"))
}
