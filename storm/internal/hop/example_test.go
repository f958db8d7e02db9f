package hop_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/idemkey/idemkey/storm/internal/hop"
)

// A provider behind an HTTP hop that answers every request of its first
// hour with 503: what storm does with --proxy and --fault.
func ExampleOpen() {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer provider.Close()

	spec, err := hop.ParseProxy("provider=127.0.0.1:0," + provider.URL)
	if err != nil {
		panic(err)
	}
	fault, err := hop.ParseFault("provider at=0s for=1h errors=100%")
	if err != nil {
		panic(err)
	}
	hops, err := hop.Open([]hop.Spec{spec}, []hop.Fault{fault}, hop.Options{})
	if err != nil {
		panic(err)
	}
	defer hops.Close()

	url := hops.Hop("provider").URL() // the service under test calls this
	resp, err := http.Post(url+"/v1/charges", "application/json", nil)
	if err != nil {
		panic(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println("before the run starts:", resp.StatusCode)

	hops.Begin(time.Now()) // the run's start: the window opens now
	resp, err = http.Post(url+"/v1/charges", "application/json", nil)
	if err != nil {
		panic(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println("in the window:", resp.StatusCode)

	for _, r := range hops.Records() {
		fmt.Printf("%s %s: %d requests, %d failed\n", r.Hop, r.Window, r.Requests, r.Failed)
	}
	// Output:
	// before the run starts: 201
	// in the window: 503
	// provider at=0s for=1h0m0s errors=100%: 1 requests, 1 failed
}
