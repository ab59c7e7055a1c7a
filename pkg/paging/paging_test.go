package paging_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/paging"
)

func TestSize(t *testing.T) {
	for n, want := range map[int32]int{0: paging.DefaultSize, 1: 1, 37: 37, paging.MaxSize: paging.MaxSize} {
		got, err := paging.Size(n)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, n := range []int32{-1, paging.MaxSize + 1, 1 << 30} {
		_, err := paging.Size(n)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%d", n)
		require.Contains(t, err.Error(), "page_size")
	}
}

func TestTokenRoundTrip(t *testing.T) {
	k, err := paging.Decode("", "f", 2)
	require.NoError(t, err)
	require.Nil(t, k, "no token: the first page")
	for _, key := range [][]string{{"demo", "alice"}, {"", ""}, {"ü/ñ", `"quoted"` + strings.Repeat("x", 300)}} {
		tok := paging.Encode("ws=demo role=", key...)
		got, err := paging.Decode(tok, "ws=demo role=", 2)
		require.NoError(t, err)
		require.Equal(t, key, got)
		require.NotContains(t, tok, "=", "URL-safe, unpadded: usable in a REST query string as is")
	}
}

func TestTokenRefusals(t *testing.T) {
	good := paging.Encode("ws=demo", "alice")
	raw, err := base64.RawURLEncoding.DecodeString(good)
	require.NoError(t, err)
	for name, tok := range map[string]string{
		"not base64":           "%%%",
		"padded":               base64.URLEncoding.EncodeToString(raw),
		"not JSON":             base64.RawURLEncoding.EncodeToString([]byte("alice")),
		"JSON with spaces":     base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), ",", ", ", 1))),
		"unknown field":        base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "{", `{"x":1,`, 1))),
		"too long":             strings.Repeat("A", 4096),
		"wrong number of keys": paging.Encode("ws=demo", "alice", "bob"),
		"other filters":        paging.Encode("ws=other", "alice"),
	} {
		_, err := paging.Decode(tok, "ws=demo", 1)
		require.Equal(t, codes.InvalidArgument, status.Code(err), name)
		require.Contains(t, err.Error(), "page_token", name)
	}
	_, err = paging.Decode(paging.Encode("ws=other", "alice"), "ws=demo", 1)
	require.Contains(t, err.Error(), "other filters")
}

func FuzzDecode(f *testing.F) {
	f.Add(paging.Encode("ws=demo", "alice"))
	f.Add("")
	f.Add("e30")
	f.Fuzz(func(t *testing.T, tok string) {
		key, err := paging.Decode(tok, "ws=demo", 1)
		if err != nil {
			require.Equal(t, codes.InvalidArgument, status.Code(err))
			return
		}
		if tok != "" {
			require.Equal(t, tok, paging.Encode("ws=demo", key...), "only tokens Encode makes are accepted")
		}
	})
}

func TestParseAndNext(t *testing.T) {
	rows := []string{"a", "b", "c"}
	key := func(s string) []string { return []string{s} }
	t.Run("pages in key order, the last without a token", func(t *testing.T) {
		p, err := paging.Parse(2, "", "f", 1)
		require.NoError(t, err)
		require.Equal(t, 3, p.Limit())
		got, next := paging.Next(p, rows, key)
		require.Equal(t, []string{"a", "b"}, got)
		p, err = paging.Parse(2, next, "f", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, p.After)
		got, next = paging.Next(p, rows[2:], key)
		require.Equal(t, []string{"c"}, got)
		require.Empty(t, next)
	})
	t.Run("an empty answer has no token", func(t *testing.T) {
		p, err := paging.Parse(0, "", "f", 1)
		require.NoError(t, err)
		require.Equal(t, paging.DefaultSize, p.Size)
		got, next := paging.Next(p, []string(nil), key)
		require.Empty(t, got)
		require.Empty(t, next)
	})
	t.Run("bad size and token name their field", func(t *testing.T) {
		_, err := paging.Parse(-1, "", "f", 1)
		require.Contains(t, err.Error(), "page_size")
		_, err = paging.Parse(1, paging.Encode("g", "a"), "f", 1)
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Contains(t, err.Error(), "page_token")
	})
}
