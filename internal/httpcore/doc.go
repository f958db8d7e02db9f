// Package httpcore is the HTTP side of idemkey, written once for the Gin
// (ginmw) and net/http (httpmw) adapters: the Idempotency-Key contract, key
// parsing, request fingerprints, response capture and replay, and RFC 9457
// problem responses.
//
// An adapter calls Guard.Begin before the application handler. Begin
// either lets the request pass (with a request to run the handler on),
// answers it itself (a replay or a problem), or returns an Exchange whose
// lease the caller holds: the adapter runs the handler through
// Exchange.Run, with the Exchange's request and a writer over its
// Recorder; Run then calls Exchange.Finish, which stores the outcome or
// ends the lease without one, and sends the response.
package httpcore
