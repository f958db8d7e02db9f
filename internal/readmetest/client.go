package readmetest

// README:begin client
import (
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

func clientQuickStart(url string) {
	t, err := idemclient.New(nil, idemclient.Options{}) // wraps http.DefaultTransport
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: t, Timeout: 30 * time.Second}
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"amount":1200}`))
	r, _ := idemclient.ResultOf(resp, err)
	log.Printf("key %s, %d attempts, replayed %v", r.Key, r.Attempts, r.Replayed)
}

// README:end
