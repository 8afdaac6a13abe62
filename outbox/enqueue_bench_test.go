package outbox

import (
	"fmt"
	"testing"
)

// benchIntents are n email intents like the bench's (cmd/internal/bench):
// a typical transactional email of about 300 bytes each.
func benchIntents(n int) []Intent {
	in := make([]Intent, n)
	for i := range in {
		in[i] = Intent{Key: fmt.Sprintf("enq1000:%d", i), Kind: KindEmail, Payload: fmt.Appendf(nil,
			`{"from":"Shop <orders@shop.example.com>","to":["customer%d@example.com"],`+
				`"subject":"Your order #%d has shipped","text":"Hello, your order #%d is on its way. `+
				`Track it at https://shop.example.com/orders/%d. Thank you for shopping with us."}`, i, i, i, i)}
	}
	return in
}

// BenchmarkEnqueueManyValidate is the Go work EnqueueMany does for 1,000
// intents before its first statement: validating them (prepare), and the
// keys and key hashes insert gathers for the write.
func BenchmarkEnqueueManyValidate(b *testing.B) {
	intents := benchIntents(1000)
	b.ReportAllocs()
	for b.Loop() {
		prepared, _, _, err := prepare(intents)
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]string, len(prepared))
		hashes := make([][]byte, len(prepared))
		hashBuf := make([]byte, 0, keyHashLen*len(prepared))
		for n := range prepared {
			hashBuf = appendKeyHash(hashBuf, prepared[n].Key)
			keys[n], hashes[n] = prepared[n].Key, hashBuf[len(hashBuf)-keyHashLen:len(hashBuf):len(hashBuf)]
		}
	}
}
