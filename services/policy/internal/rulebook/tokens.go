package rulebook

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"time"
)

// Token prefixes make a leaked secret recognizable (secret scanners, logs) and tell the
// authenticator which table to look in without a query.
const (
	PrefixUser = "mwu_"
	PrefixJob  = "mwj_"
)

// MaxTokenTTL bounds a user token's lifetime.
const MaxTokenTTL = 366 * 24 * time.Hour

// NewSecret returns a fresh 256-bit secret with prefix, and its digest (the only thing stored).
func NewSecret(prefix string) (secret string, digest []byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	secret = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Digest(secret)
}

// Digest is what the token table stores and looks up: sha256 of the whole secret. The secret
// has 256 bits of entropy, so a plain hash is as good as a slow one here.
func Digest(secret string) []byte {
	d := sha256.Sum256([]byte(secret))
	return d[:]
}

// NewTokenID returns a random, non-secret token id.
func NewTokenID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "tok_" + hex.EncodeToString(b[:])
}

// LooksLikeToken reports whether s has one of policy's prefixes and the right length; other
// strings are not policy's tokens (the static tokens are tried elsewhere).
func LooksLikeToken(s string) bool {
	return (strings.HasPrefix(s, PrefixUser) || strings.HasPrefix(s, PrefixJob)) && len(s) == 4+43
}

// ScopesWithin reports whether a token with scopes want may be minted by a caller holding
// have. An unrestricted caller (have contains "*") may mint anything; a restricted caller may
// mint only a non-empty subset of its own scopes (an empty list would mean unrestricted).
func ScopesWithin(want, have []string) bool {
	if slices.Contains(have, "*") {
		return true
	}
	if len(want) == 0 {
		return false
	}
	for _, s := range want {
		if !slices.Contains(have, s) {
			return false
		}
	}
	return true
}
