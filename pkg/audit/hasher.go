package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Hasher turns a secret into what the trail records instead: its HMAC-SHA256 under the
// service's audit key, as Vault's audit devices do. Without the key the hash reveals nothing
// and cannot be brute-forced from the trail; with HashAuditValue an auditor holding a known
// value can check whether it is the one recorded.
type Hasher struct{ key []byte }

// MinKeyBytes is the shortest audit key accepted: an HMAC key shorter than its hash's output
// would be the weak part.
const MinKeyBytes = 32

// NewHasher returns a Hasher under key (at least MinKeyBytes).
func NewHasher(key []byte) (*Hasher, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("audit: the audit key must have at least %d bytes, got %d", MinKeyBytes, len(key))
	}
	return &Hasher{key: append([]byte(nil), key...)}, nil
}

// HashPrefix begins every recorded secret.
const HashPrefix = "hmac-sha256:"

// Hash returns the recorded form of secret v.
func (h *Hasher) Hash(v string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(v))
	return HashPrefix + hex.EncodeToString(m.Sum(nil))
}
