package ticket

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/secret"
)

// idForm is the id's exact form spelled independently of ParseID: 25 free characters, and a
// last one that carries the 128th bit's three bits and zeros (a, e, i, m, q, u, y, 4).
var idForm = regexp.MustCompile(`^t_[a-z2-7]{25}[aeimquy4]$`)

var (
	now     = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	binding = Binding{Workspace: "ws", JobID: "job-1", Datatable: "main", Login: "wm_set_x", RoleIDs: []int64{3, 1, 2}}
)

func mint(t *testing.T) (Ticket, string) {
	t.Helper()
	tk, pw, err := Mint(now, time.Hour, binding)
	require.NoError(t, err)
	return tk, pw
}

func TestMintForms(t *testing.T) {
	tk, pw := mint(t)
	require.Regexp(t, idForm, tk.ID)
	got, err := ParseID(tk.ID)
	require.NoError(t, err)
	require.Equal(t, tk.ID, got)

	require.Len(t, pw, 43, "32 bytes, base64url without padding")
	raw, err := base64.RawURLEncoding.Strict().DecodeString(pw)
	require.NoError(t, err)
	require.Len(t, raw, 32)

	require.Equal(t, now, tk.CreatedAt)
	require.Equal(t, now.Add(time.Hour), tk.ExpiresAt)
	require.True(t, tk.RevokedAt.IsZero())
	require.Equal(t, []int64{1, 2, 3}, tk.RoleIDs, "role ids are stored sorted")
	require.Equal(t, []int64{3, 1, 2}, binding.RoleIDs, "the caller's slice is not touched")
	require.NotContains(t, tk.Verifier, pw, "only the verifier is kept")
}

// TestVerifier: the stored verifier verifies the ticket's own secret, not another ticket's and
// not a near miss, and it uses the stated iteration count.
func TestVerifier(t *testing.T) {
	tk, pw := mint(t)
	other, otherPW := mint(t)
	keys, err := secret.ParseScramVerifier(tk.Verifier)
	require.NoError(t, err)
	require.Equal(t, Iterations, keys.Iterations)
	require.True(t, keys.Verifies(pw))
	require.False(t, keys.Verifies(otherPW))
	require.False(t, keys.Verifies(pw[:42]))
	otherKeys, err := secret.ParseScramVerifier(other.Verifier)
	require.NoError(t, err)
	require.False(t, otherKeys.Verifies(pw))
	require.NotEqual(t, keys.Salt, otherKeys.Salt, "every verifier has its own salt")
}

// TestMintUnique: ids and secrets never repeat over many mints (128 and 256 random bits: a
// repeat here would mean the randomness is broken).
func TestMintUnique(t *testing.T) {
	const n = 500 // each mint derives a verifier (PBKDF2): about 1 ms
	ids, pws := map[string]bool{}, map[string]bool{}
	for range n {
		tk, pw := mint(t)
		require.False(t, ids[tk.ID], "id repeated: %s", tk.ID)
		require.False(t, pws[pw], "secret repeated")
		ids[tk.ID], pws[pw] = true, true
	}
}

func TestMintRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lifetime time.Duration
		edit     func(*Binding)
		want     error
	}{
		{"zero lifetime", 0, func(*Binding) {}, ErrLifetime},
		{"negative lifetime", -time.Second, func(*Binding) {}, ErrLifetime},
		{"no workspace", time.Hour, func(b *Binding) { b.Workspace = "" }, ErrBinding},
		{"no job id", time.Hour, func(b *Binding) { b.JobID = "" }, ErrBinding},
		{"no data table", time.Hour, func(b *Binding) { b.Datatable = "" }, ErrBinding},
		{"no login", time.Hour, func(b *Binding) { b.Login = "" }, ErrBinding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := binding
			tc.edit(&b)
			_, pw, err := Mint(now, tc.lifetime, b)
			require.ErrorIs(t, err, tc.want)
			require.Empty(t, pw)
		})
	}
	_, _, err := Mint(now, time.Hour, Binding{Workspace: "ws", JobID: "j", Datatable: "d", Login: "admin"})
	require.NoError(t, err, "a decision holding no catalog role (admin) is a binding too")
}

func TestUsable(t *testing.T) {
	tk, _ := mint(t)
	revoked := tk
	revoked.RevokedAt = now.Add(time.Minute)
	for _, tc := range []struct {
		name string
		tk   Ticket
		at   time.Time
		want bool
	}{
		{"at mint", tk, now, true},
		{"just before expiry", tk, tk.ExpiresAt.Add(-time.Nanosecond), true},
		{"at expiry", tk, tk.ExpiresAt, false},
		{"after expiry", tk, tk.ExpiresAt.Add(time.Hour), false},
		{"revoked", revoked, now, false},
		{"revoked, judged before the revocation time", revoked, now.Add(-time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.tk.Usable(tc.at))
		})
	}
}

// parseIDSeeds are the fuzz target's seeds, also run as a table by the normal go test.
var parseIDSeeds = []string{
	"t_aaaaaaaaaaaaaaaaaaaaaaaaaa",
	"t_77777777777777777777777774",
	"t_7777777777777777777777777q",
	"t_77777777777777777777777777", // bits beyond the 128th
	"t_aaaaaaaaaaaaaaaaaaaaaaaaab",
	"T_aaaaaaaaaaaaaaaaaaaaaaaaaa",
	"t_AAAAAAAAAAAAAAAAAAAAAAAAAA",
	"t_aaaaaaaaaaaaaaaaaaaaaaaaa",
	"t_aaaaaaaaaaaaaaaaaaaaaaaaaaa",
	"t_aaaaaaaaaaaa\naaaaaaaaaaaaa",
	"t_aaaaaaaaaaaa\raaaaaaaaaaaa",
	"t_aaaaaaaaaaaaaaaaaaaaaaaa==",
	"t_aaaaaaaaaaaaaaaaaaaaaaaa0a",
	"t_aaaaaaaaaaaaaaaaaaaaaaaa1a",
	"t-aaaaaaaaaaaaaaaaaaaaaaaaaa",
	"u_aaaaaaaaaaaaaaaaaaaaaaaaaa",
	"t_aaaaaaaaaaaaaaaaaaaaaaaaa\x00",
	"t_aaaaaaaaaaaaaaaaaaaaaaaaé",
	"",
	"t_",
	"postgres",
	"wm_set_0123456789abcdef",
}

func TestParseIDSeeds(t *testing.T) {
	for _, s := range parseIDSeeds {
		t.Run(strings.ToValidUTF8(s, "?"), func(t *testing.T) { checkParseID(t, s) })
	}
	valid := 0
	for _, s := range parseIDSeeds {
		if idForm.MatchString(s) {
			valid++
		}
	}
	require.Equal(t, 3, valid, "the seeds hold valid ids too, so both answers are exercised")
}

// checkParseID: ParseID accepts exactly the strings of the id's form, and returns them as given.
func checkParseID(t *testing.T, s string) {
	got, err := ParseID(s)
	if idForm.MatchString(s) {
		require.NoError(t, err, "%q", s)
		require.Equal(t, s, got)
		return
	}
	require.ErrorIs(t, err, ErrBadID, "%q", s)
	require.Empty(t, got)
}

func FuzzParseID(f *testing.F) {
	for _, s := range parseIDSeeds {
		f.Add(s)
	}
	f.Fuzz(checkParseID)
}
