package tenancy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

// Errors of SetLoginName.
var (
	ErrNoInstance = errors.New("tenancy: empty instance id")
	ErrNoOIDs     = errors.New("tenancy: a role set needs at least one role oid")
	ErrInvalidOID = errors.New("tenancy: oid 0 is InvalidOid, not a role")
)

const (
	// SetLoginHashBytes is how much of the SHA-256 goes into a login name: 20 bytes, 40 hex
	// characters, so a name is 47 bytes (under Postgres' 63) and collisions need ~2^80 sets.
	SetLoginHashBytes = 20

	setLoginDomain = "millwright/roleset/set-login/v1\x00"
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
