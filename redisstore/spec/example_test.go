package spec_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemkey/idemkey/redisstore/spec"
)

// A completed record, as GET returns it, read by the specification's
// names; and a value of a later major version, refused.
func ExampleParseRecord() {
	v := []byte("C-0123456789abcdef2:201:{\"id\":\"pay_1\"}")
	r, err := spec.ParseRecord(v)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.State(), r.Attempt, r.Code, string(r.Outcome))
	b, _ := json.Marshal(r)
	fmt.Println(string(b))

	_, err = spec.ParseRecord([]byte("T-a record of a later major version"))
	fmt.Println(errors.Is(err, spec.ErrUnknownVersion))
	// Output:
	// completed 2 201 {"id":"pay_1"}
	// {"kind":"C","state":"completed","flags":"-","fingerprint":"30313233343536373839616263646566","attempt":2,"code":201,"outcome":"{\"id\":\"pay_1\"}"}
	// true
}

// A tombstone's integer, unpacked.
func ExampleParseTombstone() {
	ts, err := spec.ParseTombstone([]byte("88157704997122"))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%x %d %d\n", ts.Fingerprint32, ts.Code, ts.Attempt)
	// Output:
	// 140b742c 201 2
}
