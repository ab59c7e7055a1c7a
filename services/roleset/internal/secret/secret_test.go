package secret

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testKey(b byte) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune('a'+b)), 32)))
}

func TestKeyring(t *testing.T) {
	old, err := ParseKeyring("old:" + testKey(1))
	require.NoError(t, err)
	ct, err := old.Encrypt("pw", "role:1")
	require.NoError(t, err)

	rotated, err := ParseKeyring("new:" + testKey(2) + ",old:" + testKey(1))
	require.NoError(t, err)
	cases := []struct {
		name    string
		ring    *Keyring
		ct      []byte
		aad     string
		want    string
		wantErr bool
	}{
		{"same key", old, ct, "role:1", "pw", false},
		{"rotated ring reads old ciphertext", rotated, ct, "role:1", "pw", false},
		{"other aad", old, ct, "role:2", "", true},
		{"truncated", old, ct[:5], "role:1", "", true},
		{"empty", old, nil, "role:1", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.ring.Decrypt(tc.ct, tc.aad)
			if tc.wantErr {
				require.ErrorIs(t, err, ErrUndecryptable)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	newCT, err := rotated.Encrypt("pw2", "x")
	require.NoError(t, err)
	_, err = old.Decrypt(newCT, "x")
	require.ErrorIs(t, err, ErrUndecryptable, "a ring without the new key cannot read it")
}

func TestParseKeyringRejects(t *testing.T) {
	for _, spec := range []string{"", "k:short", "bad id!:" + testKey(1), "a:" + testKey(1) + ",a:" + testKey(2)} {
		t.Run(spec, func(t *testing.T) {
			_, err := ParseKeyring(spec)
			require.Error(t, err)
		})
	}
	k, err := ParseKeyring(testKey(3))
	require.NoError(t, err)
	require.Equal(t, "k0", k.current)
}

// TestScramVerifierVector checks against RFC 7677's test vector: the ServerKey in our
// verifier must sign the RFC's AuthMessage to the RFC's ServerSignature.
func TestScramVerifierVector(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	v := scramVerifier("pencil", salt, 4096)
	parts := strings.Split(v, "$")
	require.Len(t, parts, 3)
	require.Equal(t, "4096:W22ZaJ0SNY7soEsUEjb6gQ==", parts[1])
	keys := strings.Split(parts[2], ":")
	serverKey, err := base64.StdEncoding.DecodeString(keys[1])
	require.NoError(t, err)
	authMessage := "n=user,r=rOprNGfwEbeRWgbNEkqO," +
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096," +
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	sig := base64.StdEncoding.EncodeToString(HMACSHA256(serverKey, authMessage))
	require.Equal(t, "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", sig)
	require.NotContains(t, ScramVerifier("pencil", 4096), "pencil")
}

func TestProof(t *testing.T) {
	old, err := ParseKeyring("old:" + testKey(1))
	require.NoError(t, err)
	rotated, err := ParseKeyring("new:" + testKey(2) + ",old:" + testKey(1))
	require.NoError(t, err)
	other, err := ParseKeyring("old:" + testKey(3)) // same key id, another key
	require.NoError(t, err)
	p := old.Prove("msg")
	require.True(t, strings.HasPrefix(p, "old:"))
	cases := []struct {
		name  string
		ring  *Keyring
		msg   string
		proof string
		want  bool
	}{
		{"same key", old, "msg", p, true},
		{"rotated ring verifies the old key's proof", rotated, "msg", p, true},
		{"rotated ring proves with the new key", rotated, "msg", rotated.Prove("msg"), true},
		{"another message", old, "msg2", p, false},
		{"another key under the same id", other, "msg", p, false},
		{"a proof made without the key", old, "msg", "old:" + strings.Repeat("A", 43), false},
		{"unknown key id", old, "msg", "zz" + p[3:], false},
		{"no key id", old, "msg", p[4:], false},
		{"empty", old, "msg", "", false},
		{"not base64", old, "msg", "old:!!", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.ring.VerifyProof(tc.msg, tc.proof))
		})
	}
	require.NotEqual(t, old.Prove("msg"), other.Prove("msg"))
}

// TestParseScramVerifier: a verifier we build parses back to keys that verify its password
// and no other; anything not in the exact text form is refused.
func TestParseScramVerifier(t *testing.T) {
	v := ScramVerifier("pencil", 4096)
	k, err := ParseScramVerifier(v)
	require.NoError(t, err)
	require.Equal(t, 4096, k.Iterations)
	require.Equal(t, v, k.String(), "parse and String are inverses")
	require.True(t, k.Verifies("pencil"))
	require.False(t, k.Verifies("pencil2"))
	require.False(t, k.Verifies(""))

	prefix, keys, _ := strings.Cut(v, "$4096:")
	salt, keyPart, _ := strings.Cut(keys, "$")
	stored, server, _ := strings.Cut(keyPart, ":")
	for name, bad := range map[string]string{
		"empty":                   "",
		"md5":                     "md5" + strings.Repeat("0", 32),
		"no keys":                 prefix + "$4096:" + salt,
		"no server key":           prefix + "$4096:" + salt + "$" + stored,
		"zero iterations":         prefix + "$0:" + salt + "$" + keyPart,
		"iterations not a number": prefix + "$x:" + salt + "$" + keyPart,
		"empty salt":              prefix + "$4096:$" + keyPart,
		"short stored key":        prefix + "$4096:" + salt + "$" + stored[4:] + ":" + server,
		"server key not base64":   prefix + "$4096:" + salt + "$" + stored + ":!" + server[1:],
		"salt not base64":         prefix + "$4096:!!$" + keyPart,
		"no colon after count":    prefix + "$4096" + salt + "$" + keyPart,
		"no dollar before keys":   prefix + "$4096:" + salt + keyPart,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseScramVerifier(bad)
			require.ErrorIs(t, err, ErrBadVerifier)
		})
	}
}
