package readmetest

import (
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// README:begin client
func clientQuickStart(url string) {
	t, err := idemclient.New(nil, idemclient.Options{}) // wraps http.DefaultTransport
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: t, Timeout: 30 * time.Second}
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"amount":1200}`))
	r, _ := idemclient.ResultOf(resp, err) // the key it minted, attempts, whether replayed
	log.Printf("key %s, %d attempts, replayed %v", r.Key, r.Attempts, r.Replayed)
}

// README:end
