package tenancy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

// Errors of SetLoginName and DerivePassword.
var (
	ErrNoInstance  = errors.New("tenancy: empty instance id")
	ErrNoOIDs      = errors.New("tenancy: a role set needs at least one role oid")
	ErrInvalidOID  = errors.New("tenancy: oid 0 is InvalidOid, not a role")
	ErrShortSecret = errors.New("tenancy: the login secret must be at least 32 bytes")
)

const (
	// SetLoginHashBytes is how much of the SHA-256 goes into a login name: 20 bytes, 40 hex
	// characters, so a name is 47 bytes (under Postgres' 63) and collisions need ~2^80 sets.
	SetLoginHashBytes = 20

	// MinSecretLen is the shortest accepted DerivePassword secret (256 bits).
	MinSecretLen = 32

	setLoginDomain = "millwright/roleset/set-login/v1\x00"
	passwordDomain = "millwright/roleset/login-password/v1\x00"
)

// SetLoginName names the role-set login that is a member of exactly the roles with these
// oids, for one millwright instance:
//
//	wm_set_ + hex(SHA-256("millwright/roleset/set-login/v1\x00"
//	                      || uint32be(len(instanceID)) || instanceID
//	                      || uint32be(oid) for each oid, sorted ascending, duplicates dropped)[:20])
//
// The hash is over oids, not names, so renaming a role moves nothing, while dropping and
// re-creating one (a new oid) re-entitles everyone. The instance id keeps two instances that
// share a cluster from ever sharing, sweeping or retiring each other's logins. The order and
// repetition of oids do not matter. The result is 47 bytes of [a-z0-9_] and passes no
// rolename.Validate (its prefix is reserved). This format is persistent: changing it
// orphans every existing login, so it carries a version in its domain string.
//
// A single role connects as that role's own login; callers use this only for two or more.
func SetLoginName(instanceID string, oids []uint32) (string, error) {
	if instanceID == "" {
		return "", ErrNoInstance
	}
	if len(oids) == 0 {
		return "", ErrNoOIDs
	}
	set := slices.Clone(oids)
	slices.Sort(set)
	set = slices.Compact(set)
	if set[0] == 0 {
		return "", ErrInvalidOID
	}
	h := sha256.New()
	h.Write([]byte(setLoginDomain))
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(instanceID)))
	h.Write(n[:])
	h.Write([]byte(instanceID))
	for _, oid := range set {
		binary.BigEndian.PutUint32(n[:], oid)
		h.Write(n[:])
	}
	return rolename.SetLoginPrefix + hex.EncodeToString(h.Sum(nil)[:SetLoginHashBytes]), nil
}

// DerivePassword computes a login's password as
//
//	base64url-unpadded(HMAC-SHA256(secret, "millwright/roleset/login-password/v1\x00" || login))
//
// 43 characters of [A-Za-z0-9_-] (256 bits), safe in a connection string and in a literal.
//
// Why deterministic: replicas that race to create the same wm_set_ login all compute the same
// password, so the one that loses the CREATE ROLE race still knows the password the winner
// set and connects with it; a random password would be lost with the loser, and having the
// loser ALTER ROLE ... PASSWORD would break the winner's new connections (postgres-roles.md
// §2, "Password race").
//
// Trade-offs: the secret now stands for every set-login password, so it is kept like the
// cluster admin password (encrypted at rest, never logged) and must be at least 32 bytes; a
// short or empty secret is refused, since login names are not secret. Rotating the secret
// gives every login a new password: the store resets it with ALTER ROLE on next use (open
// sessions keep running; a connection resolved just before the reset fails to authenticate
// and is resolved again).
func DerivePassword(secret []byte, login string) (string, error) {
	if len(secret) < MinSecretLen {
		return "", ErrShortSecret
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(passwordDomain))
	m.Write([]byte(login))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}
