package client

import (
	"math/rand/v2"
	"time"
)

// Backoff steps: the first retry's cap is half a second, each further retry
// doubles it, and no cap exceeds eight seconds.
const (
	backoffBase = 500 * time.Millisecond
	backoffMax  = 8 * time.Second
)

// backoffCap is the cap for retry n (1 for the first retry):
// min(0.5s·2^(n-1), 8s).
func backoffCap(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 5 { // 0.5s·2^4 = 8s already; avoid shifting into overflow.
		return backoffMax
	}
	return min(backoffBase<<(n-1), backoffMax)
}

// backoff is the wait before retry n when the server named none: uniform in
// [cap/2, cap]. The jitter keeps a fleet of clients that failed together from
// retrying together, so a recovering server is not hit by a synchronised wave.
func backoff(n int) time.Duration {
	c := backoffCap(n)
	half := c / 2
	return half + time.Duration(rand.Int64N(int64(c-half)+1))
}
