package paging

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/millwright/millwright/pkg/errs"
)

// DefaultSize is the page size of a request that asks for none; MaxSize the largest answered.
const (
	DefaultSize = 100
	MaxSize     = 500
)

// maxTokenLen bounds what Decode reads: keys are names and ids of at most a few hundred bytes.
const maxTokenLen = 2048

// Rules named in InvalidArgument answers.
const (
	RuleSize  = "page_size"
	RuleToken = "page_token"
)

// Size is the page size of a request: 0 means DefaultSize, 1..MaxSize as asked; anything else
// is InvalidArgument naming page_size.
func Size(n int32) (int, error) {
	switch {
	case n == 0:
		return DefaultSize, nil
	case n < 0 || n > MaxSize:
		return 0, errs.InvalidField("page_size", RuleSize, fmt.Sprintf("page_size must be 0..%d (0 means %d)", MaxSize, DefaultSize))
	}
	return int(n), nil
}

type token struct {
	F string   `json:"f"` // digest of the filters
	K []string `json:"k"` // the last key of the page, one string per key column
}

// digest is short: it tells filters apart, it does not protect anything.
func digest(filters string) string {
	d := sha256.Sum256([]byte(filters))
	return hex.EncodeToString(d[:8])
}

// Encode is the next_page_token after a page whose last row has key, for a request with
// filters (any string that differs when the filters differ, e.g. fmt.Sprint of them).
func Encode(filters string, key ...string) string { return token{F: digest(filters), K: key}.encode() }

func (t token) encode() string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err) // strings always marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode returns the key of a page token issued by Encode for the same filters with n key
// parts; nil for "" (the first page). Anything else is InvalidArgument naming page_token.
func Decode(t, filters string, n int) ([]string, error) {
	if t == "" {
		return nil, nil
	}
	var tok token
	if len(t) > maxTokenLen || !tok.decode(t) || len(tok.K) != n {
		return nil, errs.InvalidField("page_token", RuleToken, "page_token is not a token this service issued")
	}
	if tok.F != digest(filters) {
		return nil, errs.InvalidField("page_token", RuleToken,
			"page_token was issued for other filters: send the first page's filters, or start again without a token")
	}
	return tok.K, nil
}

// decode accepts exactly the bytes encode makes: base64 and JSON both tolerate variants
// (padding, spacing, unknown fields, field order) that no token of ours has.
func (t *token) decode(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && json.Unmarshal(b, t) == nil && t.encode() == s
}
