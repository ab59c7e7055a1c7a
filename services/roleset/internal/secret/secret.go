package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Keyring encrypts with its first key and decrypts with any of them, chosen by the key id
// stored in front of the ciphertext. Rotation: prepend a new key, re-encrypt at leisure, then
// drop the old one.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
	macKeys map[string][]byte // per key id: the ownership-proof key derived from it (Prove)
}

var keyIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ParseKeyring reads "id:base64key[,id:base64key...]" (the first is the current key) or a bare
// base64 key, which gets the id "k0". Every key must decode to exactly 32 bytes.
func ParseKeyring(spec string) (*Keyring, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("encryption key: empty")
	}
	k := &Keyring{aeads: map[string]cipher.AEAD{}, macKeys: map[string][]byte{}}
	for i, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		id, b64, ok := strings.Cut(part, ":")
		if !ok {
			id, b64 = "k0", part
		}
		if !keyIDRe.MatchString(id) {
			return nil, fmt.Errorf("encryption key %d: id must match %s", i, keyIDRe)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			raw, err = base64.RawURLEncoding.DecodeString(b64)
		}
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("encryption key %q: want base64 of 32 bytes", id)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("encryption key %q: duplicate id", id)
		}
		k.aeads[id] = aead
		// A separate key for MACs, so the encryption key is never used for two purposes.
		if k.macKeys[id], err = hkdf.Key(sha256.New, raw, nil, proofInfo, sha256.Size); err != nil {
			return nil, err
		}
		if i == 0 {
			k.current = id
		}
	}
	return k, nil
}

// Encrypt seals plaintext bound to aad (what the value belongs to, e.g. "role:42"), so a
// ciphertext copied into another row does not decrypt. Layout: len(id) | id | nonce | sealed.
func (k *Keyring) Encrypt(plaintext, aad string) ([]byte, error) {
	aead := k.aeads[k.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := make([]byte, 0, 1+len(k.current)+len(nonce)+len(plaintext)+aead.Overhead())
	out = append(out, byte(len(k.current)))
	out = append(out, k.current...)
	out = append(out, nonce...)
	return aead.Seal(out, nonce, []byte(plaintext), []byte(aad)), nil
}

// ErrUndecryptable is returned for a ciphertext under an unknown key, cut short, or not bound
// to the given aad. It never says which.
var ErrUndecryptable = errors.New("secret: cannot decrypt")

// Decrypt opens a value sealed by Encrypt with the same aad.
func (k *Keyring) Decrypt(ct []byte, aad string) (string, error) {
	if len(ct) < 1 {
		return "", ErrUndecryptable
	}
	n := int(ct[0])
	if len(ct) < 1+n {
		return "", ErrUndecryptable
	}
	aead, ok := k.aeads[string(ct[1:1+n])]
	if !ok {
		return "", ErrUndecryptable
	}
	rest := ct[1+n:]
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return "", ErrUndecryptable
	}
	pt, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], []byte(aad))
	if err != nil {
		return "", ErrUndecryptable
	}
	return string(pt), nil
}

// proofInfo is the HKDF label of the ownership-proof key; a new proof format gets a new label.
const proofInfo = "millwright roleset ownership proof v1"

// Prove returns "<key id>:<MAC>": HMAC-SHA256 of msg under the ownership-proof key derived
// from the current key. roleset writes it as the comment of each role it makes on a target
// cluster: another holder of CREATEROLE there can read and copy comments but, without this
// key, cannot make one that verifies for another message (msg binds the role's oid).
func (k *Keyring) Prove(msg string) string {
	return k.current + ":" + base64.RawURLEncoding.EncodeToString(HMACSHA256(k.macKeys[k.current], msg))
}

// VerifyProof reports whether proof is Prove(msg) under any key of the ring (the key id in
// front says which), in constant time.
func (k *Keyring) VerifyProof(msg, proof string) bool {
	id, b64, ok := strings.Cut(proof, ":")
	if !ok {
		return false
	}
	key, ok := k.macKeys[id]
	if !ok {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return false
	}
	return hmac.Equal(got, HMACSHA256(key, msg))
}

// NewPassword returns a random 256-bit password, URL-safe base64 (43 characters): safe in a
// connection string without escaping.
func NewPassword() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("secret: crypto/rand failed: " + err.Error()) // the platform is broken; never fall back
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// DefaultIterations is the PBKDF2 iteration count of the verifiers we build: the Postgres
// default. The passwords are random and 256-bit, so stretching adds no strength; the count only
// decides the server's and each client's CPU per login and per CREATE ROLE (postgres-roles.md
// §1). It is configurable, and kept at the default until a security review says otherwise.
const DefaultIterations = 4096

// ScramVerifier builds the SCRAM-SHA-256 verifier Postgres stores for password (RFC 5802/7677,
// the format of pg_authid.rolpassword): SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>.
// Sending it in CREATE/ALTER ROLE ... PASSWORD keeps the plaintext out of statement text. The
// password is used as is (SASLprep is the identity on our ASCII passwords).
func ScramVerifier(password string, iterations int) string {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		panic("secret: crypto/rand failed: " + err.Error())
	}
	return scramVerifier(password, salt, iterations)
}

func scramVerifier(password string, salt []byte, iterations int) string {
	return deriveScramKeys(password, salt, iterations).String()
}

// ScramKeys is a SCRAM-SHA-256 verifier taken apart: what a server needs to check a client's
// proof (StoredKey) and to prove itself back (ServerKey), and what it tells the client to salt
// with. It holds nothing that logs the client in: the password is needed to make a proof.
type ScramKeys struct {
	Iterations int
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
}

func deriveScramKeys(password string, salt []byte, iterations int) ScramKeys {
	clientKey, serverKey, err := ScramClientKeys(password, salt, iterations)
	if err != nil {
		panic("secret: pbkdf2: " + err.Error()) // only for invalid parameters, a programming error
	}
	storedKey := sha256.Sum256(clientKey)
	return ScramKeys{Iterations: iterations, Salt: salt, StoredKey: storedKey[:], ServerKey: serverKey}
}

// ScramClientKeys derives from password the SCRAM-SHA-256 ClientKey (what a client's proof is
// made from; its hash is the verifier's StoredKey) and ServerKey (what checks the server's
// signature) under the salt and iteration count a server announces. The PBKDF2 in it is
// nearly all of a SCRAM client's CPU, and its result depends on these three inputs only, so
// a client that logs in often may keep it (roleset's proxy does, for its upstream logins).
// An error is only for parameters PBKDF2 refuses (in FIPS 140-only mode, a salt shorter than
// 128 bits).
func ScramClientKeys(password string, salt []byte, iterations int) (clientKey, serverKey []byte, err error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return nil, nil, err
	}
	return HMACSHA256(salted, "Client Key"), HMACSHA256(salted, "Server Key"), nil
}

// String is the verifier in Postgres's text form: SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>.
func (k ScramKeys) String() string {
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", k.Iterations, enc(k.Salt), enc(k.StoredKey), enc(k.ServerKey))
}

// ErrBadVerifier is a verifier not in the text form ScramKeys.String writes.
var ErrBadVerifier = errors.New("secret: not a SCRAM-SHA-256 verifier")

// ParseScramVerifier takes apart a verifier in Postgres's text form (what ScramVerifier
// returns), for a server side of SCRAM such as roleset's proxy.
func ParseScramVerifier(v string) (ScramKeys, error) {
	rest, ok := strings.CutPrefix(v, "SCRAM-SHA-256$")
	if !ok {
		return ScramKeys{}, ErrBadVerifier
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return ScramKeys{}, ErrBadVerifier
	}
	iter, salt, ok1 := strings.Cut(params, ":")
	stored, server, ok2 := strings.Cut(keys, ":")
	if !ok1 || !ok2 {
		return ScramKeys{}, ErrBadVerifier
	}
	var k ScramKeys
	var err error
	if k.Iterations, err = strconv.Atoi(iter); err != nil || k.Iterations < 1 {
		return ScramKeys{}, ErrBadVerifier
	}
	dec := base64.StdEncoding.Strict().DecodeString
	if k.Salt, err = dec(salt); err != nil || len(k.Salt) == 0 {
		return ScramKeys{}, ErrBadVerifier
	}
	if k.StoredKey, err = dec(stored); err != nil || len(k.StoredKey) != sha256.Size {
		return ScramKeys{}, ErrBadVerifier
	}
	if k.ServerKey, err = dec(server); err != nil || len(k.ServerKey) != sha256.Size {
		return ScramKeys{}, ErrBadVerifier
	}
	return k, nil
}

// Verifies reports whether password is the one these keys were made from (in constant time
// in the keys' contents): a check for tests and tools, not a login path (SCRAM never sends
// the password).
func (k ScramKeys) Verifies(password string) bool {
	got := deriveScramKeys(password, k.Salt, k.Iterations)
	return hmac.Equal(got.StoredKey, k.StoredKey) && hmac.Equal(got.ServerKey, k.ServerKey)
}

// HMACSHA256 is HMAC-SHA-256 of msg under key: the MAC of ownership proofs and of SCRAM.
func HMACSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}
