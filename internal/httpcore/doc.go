// Package httpcore is the HTTP side of idemkey, written once for the Gin
// (ginmw) and net/http (httpmw) adapters: the Idempotency-Key contract, key
// parsing, request fingerprints, response capture and replay, and RFC 9457
// problem responses.
//
// An adapter calls Guard.Begin before the application handler. Begin
// either lets the request pass, answers it itself (a replay or a problem),
// or returns an Exchange whose lease the caller holds: the adapter runs the
// handler with the Exchange's request and a writer over its Recorder, and
// then calls Exchange.Finish, which stores the outcome or releases the key
// and sends the response.
package httpcore
