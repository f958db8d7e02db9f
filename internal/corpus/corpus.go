// Package corpus generates realistic API response bodies for measuring what
// stored responses cost: payment-like JSON full of random IDs, low-entropy
// order JSON, and small and large bodies. Nothing in it is copied data: every
// body comes from a seeded generator, so a seed always gives the same bodies
// and different seeds give different ones (as two days of traffic would).
//
// Use one seed's bodies to train a dictionary and another's to measure it,
// so that the measurement never compresses a body the dictionary has seen.
package corpus

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Kind is one sort of response body.
type Kind struct {
	// Name is short and stable, for tables and sub-benchmark names.
	Name string
	// About is the typical body size in bytes.
	About int
	// Describe says what the bodies are like, in a few words.
	Describe string

	gen func(r *rand.Rand) (body []byte, location string)
}

// The kinds of body the corpus generates.
var (
	// Payment is ID-heavy payment-intent JSON of about 1 KiB: a dozen
	// random identifiers, a client secret, an address, metadata. Random IDs
	// are what keeps small API bodies from compressing well.
	Payment = Kind{Name: "payment-1k", About: 1075, Describe: "ID-heavy payment JSON", gen: payment}
	// Order is low-entropy order JSON of about 800 B: items from a small
	// catalogue, statuses, round amounts, one order ID.
	Order = Kind{Name: "order-800", About: 800, Describe: "low-entropy order JSON", gen: order}
	// Small is a 100-byte payment answer, as most create calls return.
	Small = Kind{Name: "small-100", About: 100, Describe: "100 B payment JSON", gen: small}
	// Large is a 16 KiB batch of payment intents, as a bulk create returns.
	Large = Kind{Name: "batch-16k", About: 16 << 10, Describe: "16 KiB batch of payment JSON", gen: batch}
)

// Kinds returns every kind, smallest first.
func Kinds() []Kind { return []Kind{Small, Order, Payment, Large} }

// Sample is one generated response: its body and the Location header the
// handler that made it would set.
type Sample struct {
	Body     []byte
	Location string
}

// Samples returns n samples of kind k from seed: the same seed always gives
// the same samples.
func (k Kind) Samples(seed uint64, n int) []Sample {
	r := rand.New(rand.NewPCG(seed, uint64(len(k.Name))<<32|uint64(k.About)))
	out := make([]Sample, n)
	for i := range out {
		out[i].Body, out[i].Location = k.gen(r)
	}
	return out
}

// Bodies returns the bodies of k.Samples(seed, n).
func (k Kind) Bodies(seed uint64, n int) [][]byte {
	s := k.Samples(seed, n)
	out := make([][]byte, n)
	for i := range s {
		out[i] = s[i].Body
	}
	return out
}

const (
	alnum = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	hex   = "0123456789abcdef"
)

// id returns prefix followed by n random base-62 characters, the shape of
// most payment providers' object IDs.
func id(r *rand.Rand, prefix string, n int) string {
	var b strings.Builder
	b.Grow(len(prefix) + n)
	b.WriteString(prefix)
	for range n {
		b.WriteByte(alnum[r.IntN(len(alnum))])
	}
	return b.String()
}

// uuid returns a random version-4 UUID.
func uuid(r *rand.Rand) string {
	var b [36]byte
	for i := range b {
		b[i] = hex[r.IntN(16)]
	}
	b[8], b[13], b[18], b[23] = '-', '-', '-', '-'
	b[14] = '4'
	b[19] = "89ab"[r.IntN(4)]
	return string(b[:])
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

var (
	currencies = []string{"eur", "usd", "gbp", "chf", "sek"}
	firstNames = []string{"Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Leslie", "Margaret", "John"}
	lastNames  = []string{"Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson", "Perlman", "Lamport", "Hamilton", "Backus"}
	cities     = []string{"Berlin", "Lyon", "Leeds", "Zurich", "Malmo", "Austin", "Porto", "Utrecht", "Gdansk", "Turin"}
	countries  = []string{"DE", "FR", "GB", "CH", "SE", "US", "PT", "NL", "PL", "IT"}
	streets    = []string{"Main Street", "Station Road", "Rue de la Paix", "Hauptstrasse", "Kungsgatan", "Via Roma", "Church Lane"}
	brands     = []string{"visa", "mastercard", "amex"}
	statuses   = []string{"succeeded", "succeeded", "succeeded", "requires_capture", "processing"}
	products   = []struct {
		sku, name string
		cents     int64
	}{
		{"SKU-TSHIRT-M", "T-shirt, medium", 1900}, {"SKU-TSHIRT-L", "T-shirt, large", 1900},
		{"SKU-MUG", "Coffee mug", 1200}, {"SKU-STICKERS", "Sticker pack", 500},
		{"SKU-HOODIE-M", "Hoodie, medium", 4900}, {"SKU-CAP", "Cap", 2200}, {"SKU-BOOK", "Handbook", 3500},
	}
)

type address struct {
	Line1      string `json:"line1"`
	Line2      any    `json:"line2"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	Country    string `json:"country"`
}

type card struct {
	Brand       string `json:"brand"`
	Last4       string `json:"last4"`
	ExpMonth    int    `json:"exp_month"`
	ExpYear     int    `json:"exp_year"`
	Fingerprint string `json:"fingerprint"`
	Funding     string `json:"funding"`
	Network     string `json:"network"`
}

type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountReceived     int64             `json:"amount_received"`
	AmountCapturable   int64             `json:"amount_capturable"`
	Currency           string            `json:"currency"`
	Status             string            `json:"status"`
	Created            int64             `json:"created"`
	Customer           string            `json:"customer"`
	Description        string            `json:"description"`
	ClientSecret       string            `json:"client_secret"`
	LatestCharge       string            `json:"latest_charge"`
	PaymentMethod      string            `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	CaptureMethod      string            `json:"capture_method"`
	ConfirmationMethod string            `json:"confirmation_method"`
	CanceledAt         *int64            `json:"canceled_at"`
	LastPaymentError   *string           `json:"last_payment_error"`
	NextAction         *string           `json:"next_action"`
	StatementDesc      string            `json:"statement_descriptor"`
	TransferGroup      *string           `json:"transfer_group"`
	ReceiptEmail       string            `json:"receipt_email"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	Shipping           struct {
		Name    string  `json:"name"`
		Address address `json:"address"`
	} `json:"shipping"`
	Card card `json:"card"`
}

func newPaymentIntent(r *rand.Rand) paymentIntent {
	amount := int64(100 + r.IntN(500000))
	first, last := pick(r, firstNames), pick(r, lastNames)
	p := paymentIntent{
		ID:                 id(r, "pi_", 24),
		Object:             "payment_intent",
		Amount:             amount,
		AmountReceived:     amount,
		Currency:           pick(r, currencies),
		Status:             pick(r, statuses),
		Created:            1_767_225_600 + r.Int64N(180*86400),
		Customer:           id(r, "cus_", 14),
		Description:        fmt.Sprintf("Order #%d", 100000+r.IntN(900000)),
		LatestCharge:       id(r, "ch_", 24),
		PaymentMethod:      id(r, "pm_", 24),
		PaymentMethodTypes: []string{"card"},
		CaptureMethod:      "automatic",
		ConfirmationMethod: "automatic",
		StatementDesc:      "IDEMKEY SHOP",
		ReceiptEmail:       strings.ToLower(first+"."+last) + fmt.Sprintf("%d@example.com", r.IntN(1000)),
		Metadata:           map[string]string{"order_id": uuid(r), "cart_id": id(r, "cart_", 16)},
	}
	p.ClientSecret = p.ID + "_secret_" + id(r, "", 25)
	p.Shipping.Name = first + " " + last
	i := r.IntN(len(cities))
	p.Shipping.Address = address{Line1: fmt.Sprintf("%d %s", 1+r.IntN(200), pick(r, streets)),
		City: cities[i], PostalCode: fmt.Sprintf("%05d", r.IntN(100000)), Country: countries[i]}
	p.Card = card{Brand: pick(r, brands), Last4: fmt.Sprintf("%04d", r.IntN(10000)), ExpMonth: 1 + r.IntN(12),
		ExpYear: 2027 + r.IntN(6), Fingerprint: id(r, "", 16), Funding: "credit", Network: "visa"}
	p.Card.Network = p.Card.Brand
	return p
}

func payment(r *rand.Rand) ([]byte, string) {
	p := newPaymentIntent(r)
	return mustJSON(p), "/v1/payment_intents/" + p.ID
}

type lineItem struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Quantity  int    `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
	Total     int64  `json:"total"`
	Taxable   bool   `json:"taxable"`
}

type orderBody struct {
	ID       string     `json:"id"`
	Object   string     `json:"object"`
	Status   string     `json:"status"`
	Currency string     `json:"currency"`
	Items    []lineItem `json:"items"`
	Subtotal int64      `json:"subtotal"`
	Shipping int64      `json:"shipping"`
	Tax      int64      `json:"tax"`
	Total    int64      `json:"total"`
	Payment  struct {
		Status string `json:"status"`
		Method string `json:"method"`
	} `json:"payment"`
	Fulfillment struct {
		Status  string `json:"status"`
		Carrier string `json:"carrier"`
		Service string `json:"service"`
	} `json:"fulfillment"`
	Channel string   `json:"channel"`
	Tags    []string `json:"tags"`
}

func order(r *rand.Rand) ([]byte, string) {
	o := orderBody{ID: fmt.Sprintf("ord_%d", 1_000_000+r.IntN(9_000_000)), Object: "order", Status: "confirmed",
		Currency: pick(r, currencies[:2]), Channel: "web", Tags: []string{"standard"}}
	n := 4 + r.IntN(2)
	for range n {
		p := pick(r, products)
		q := 1 + r.IntN(3)
		o.Items = append(o.Items, lineItem{SKU: p.sku, Name: p.name, Quantity: q, UnitPrice: p.cents,
			Total: p.cents * int64(q), Taxable: true})
		o.Subtotal += p.cents * int64(q)
	}
	o.Shipping = 495
	o.Tax = o.Subtotal / 5
	o.Total = o.Subtotal + o.Shipping + o.Tax
	o.Payment.Status, o.Payment.Method = "authorized", "card"
	o.Fulfillment.Status, o.Fulfillment.Carrier, o.Fulfillment.Service = "pending", "dhl", "standard"
	return mustJSON(o), "/v1/orders/" + o.ID
}

type smallPayment struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

func small(r *rand.Rand) ([]byte, string) {
	p := smallPayment{ID: id(r, "pay_", 16), Object: "payment", Amount: int64(100 + r.IntN(100000)),
		Currency: pick(r, currencies), Status: "succeeded"}
	return mustJSON(p), "/v1/payments/" + p.ID
}

type batchBody struct {
	ID     string          `json:"id"`
	Object string          `json:"object"`
	Status string          `json:"status"`
	Count  int             `json:"count"`
	Data   []paymentIntent `json:"data"`
}

func batch(r *rand.Rand) ([]byte, string) {
	b := batchBody{ID: id(r, "batch_", 20), Object: "batch", Status: "completed", Count: 15}
	for range b.Count {
		b.Data = append(b.Data, newPaymentIntent(r))
	}
	return mustJSON(b), "/v1/batches/" + b.ID
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the corpus's own types always encode
	}
	return b
}
