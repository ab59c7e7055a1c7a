package ticket

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/millwright/millwright/services/roleset/internal/secret"
)

// Iterations is the PBKDF2 iteration count of a ticket's verifier: Postgres's default (and the
// smallest RFC 7677 wants clients to accept). Stretching protects guessable passwords; a
// ticket secret is 256 random bits, which no number of guesses finds, so more iterations would
// add no strength and only cost CPU: the client's on every connect through the proxy, and
// roleset's once per ticket minted.
const Iterations = secret.DefaultIterations

// idPrefix marks a ticket id, so a proxy's user name is told from a login name at a glance.
const idPrefix = "t_"

// idBytes is the random part of an id: 128 bits, never guessed or repeated.
const idBytes = 16

// idEncoding is lower-case base32 without padding: 26 characters, safe as a PostgreSQL user
// name in any connection string (libpq folds nothing, needs no quoting).
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// idLen is the length of every id: "t_" and 26 characters.
var idLen = len(idPrefix) + idEncoding.EncodedLen(idBytes)

// Binding is what a ticket is good for: one run of one workspace, one data table, and the
// decision taken for it (the login to connect upstream as, and the roles that login holds).
type Binding struct {
	Workspace string
	JobID     string
	Datatable string
	Login     string
	RoleIDs   []int64 // sorted; empty for a login holding no catalog role (admin)
}

// Ticket is a minted ticket as stored: never its secret.
type Ticket struct {
	ID       string
	Verifier string // SCRAM-SHA-256 verifier of the secret, Postgres's text form
	Binding
	// Reference is the data-table reference the ticket was resolved for, and TokenEnc the run's
	// job token encrypted at rest: with them the decision is taken again when a session starts
	// and when an event may have changed it (set by the caller after Mint).
	Reference string
	TokenEnc  []byte
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt time.Time // zero while not revoked
}

// Usable reports whether the ticket may authenticate at now: not revoked and not expired.
func (t Ticket) Usable(now time.Time) bool {
	return t.RevokedAt.IsZero() && now.Before(t.ExpiresAt)
}

// Errors of Mint.
var (
	ErrLifetime = errors.New("ticket: max lifetime must be positive")
	ErrBinding  = errors.New("ticket: binding needs a workspace, job id, data table and login")
)

// Mint makes a ticket for the binding, expiring maxLifetime after now (it ends sooner when the
// run's end revokes it), and returns it with its secret. The secret exists only in what Mint
// returns: the caller hands it to the job and keeps the ticket.
func Mint(now time.Time, maxLifetime time.Duration, b Binding) (Ticket, string, error) {
	if maxLifetime <= 0 {
		return Ticket{}, "", ErrLifetime
	}
	if b.Workspace == "" || b.JobID == "" || b.Datatable == "" || b.Login == "" {
		return Ticket{}, "", ErrBinding
	}
	// A copy the caller cannot change afterwards, in the one order the store keeps.
	// Never nil: an admin decision holds no catalog role, and the column is NOT NULL.
	b.RoleIDs = append([]int64{}, slices.Sorted(slices.Values(b.RoleIDs))...)
	pw := secret.NewPassword()
	return Ticket{
		ID:        newID(),
		Verifier:  secret.ScramVerifier(pw, Iterations),
		Binding:   b,
		CreatedAt: now,
		ExpiresAt: now.Add(maxLifetime),
	}, pw, nil
}

func newID() string {
	raw := make([]byte, idBytes)
	_, _ = rand.Read(raw) // never fails: crypto/rand crashes the program rather than return short
	return idPrefix + idEncoding.EncodeToString(raw)
}

// ErrBadID is a string that is not a ticket id.
var ErrBadID = errors.New("ticket: not a ticket id")

// ParseID returns s if it is exactly of an id's form ("t_" and the canonical lower-case base32
// of 16 bytes), else ErrBadID. The proxy receives it as a user name from anyone who connects:
// refusing everything else before any lookup keeps odd bytes out of queries and logs.
func ParseID(s string) (string, error) {
	// The length first: the decoder would skip \r and \n, and nothing long gets decoded.
	if len(s) != idLen || !strings.HasPrefix(s, idPrefix) {
		return "", ErrBadID
	}
	raw, err := idEncoding.DecodeString(s[len(idPrefix):])
	// Re-encoding refuses a last character with bits set beyond the 128 (two spellings of one id).
	if err != nil || len(raw) != idBytes || idPrefix+idEncoding.EncodeToString(raw) != s {
		return "", ErrBadID
	}
	return s, nil
}
