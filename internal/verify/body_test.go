package verify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const payment = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

func TestChangeOneValue(t *testing.T) {
	for _, tc := range []struct {
		in, out, change, err string
	}{
		{payment, `{"amount": 1201, "currency": "EUR", "customer": "cus_1"}`, "$.amount: 1200 -> 1201", ""},
		{`{"customer": "cus_1", "amount": 1200}`, `{"customer": "cus_1", "amount": 1201}`, "$.amount: 1200 -> 1201", ""},
		{`{"a": {"b c": [true, -2.5]}}`, `{"a": {"b c": [true, -1.5]}}`, `$.a["b c"][1]: -2.5 -> -1.5`, ""},
		{`{"items": [{"sku": "x\"y", "ok": false}]}`, `{"items": [{"sku": "x\"yx", "ok": false}]}`, `$.items[0].sku: "x\"y" -> "x\"yx"`, ""},
		{`[false, null]`, `[true, null]`, "$[0]: false -> true", ""},
		{`  7 `, `  8 `, "$: 7 -> 8", ""},
		{`{"n": 9223372036854775807}`, `{"n": 9223372036854775806}`, "$.n: 9223372036854775807 -> 9223372036854775806", ""},
		{`{"n": 1e400}`, `{"n": 0}`, "$.n: 1e400 -> 0", ""},
		{`{}`, "", "", "no number, string or boolean"},
		{`{"a": null}`, "", "", "no number, string or boolean"},
		{``, "", "", "no body"},
		{`amount=1200`, "", "", "not JSON"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			out, change, err := changeOneValue([]byte(tc.in), "--alt-body")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.out, string(out))
			require.Equal(t, tc.change, change)
		})
	}
}

func TestReformat(t *testing.T) {
	out, err := reformat([]byte(payment))
	require.NoError(t, err)
	require.Equal(t, "{\n    \"amount\": 1200,\n    \"currency\": \"EUR\",\n    \"customer\": \"cus_1\"\n}\n", string(out))
	already := []byte("{\n    \"a\": 1\n}\n")
	out, err = reformat(already)
	require.NoError(t, err)
	require.NotEqual(t, already, out)
	require.JSONEq(t, string(already), string(out))
	_, err = reformat([]byte("a=1"))
	require.Error(t, err)
}

func TestDiffBytes(t *testing.T) {
	require.Empty(t, diffBytes([]byte("same"), []byte("same")))
	require.Equal(t, `body differs at byte 11: "{\"id\":\"pay_2\"}", not "{\"id\":\"pay_1\"}"`,
		diffBytes([]byte(`{"id":"pay_1"}`), []byte(`{"id":"pay_2"}`)))
	require.Contains(t, diffBytes([]byte("abc"), []byte("ab")), `differs at byte 2: (end), not "abc"`)
	require.Contains(t, diffBytes([]byte("a"), []byte("a\x1b[31m")), `"a\x1b[31m", not (end)`)
}
