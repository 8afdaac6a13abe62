package client

import (
	"crypto/sha256"
	"encoding/hex"
)

// KeyFingerprint returns a short fingerprint of the client's API key:
// "sha256:" and the first 12 hex digits of the key's SHA-256. It tells two
// keys apart without revealing either, so it may be stored and shown; the
// outbox records it with an intent's first attempt, because the API may
// scope idempotency keys per API key. Empty when the client has no key.
func (c *Client) KeyFingerprint() string {
	if c == nil {
		return ""
	}
	key := c.cfg.apiKey.reveal()
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:6])
}
