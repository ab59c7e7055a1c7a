package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPageToken(t *testing.T) {
	for _, id := range []int64{1, 42, 1 << 40} {
		got, err := decodePageToken(encodePageToken(id))
		require.NoError(t, err)
		require.Equal(t, id, got)
	}
	got, err := decodePageToken("")
	require.NoError(t, err)
	require.Zero(t, got)
	for _, bad := range []string{"zzz", "!!", encodeRaw("before:-1"), encodeRaw("before:x"), encodeRaw("after:3"), encodeRaw("before:0")} {
		_, err := decodePageToken(bad)
		require.Error(t, err, bad)
	}
}

// FuzzPageToken: page tokens come from clients; decoding never panics and only accepts what
// encodePageToken produces.
func FuzzPageToken(f *testing.F) {
	f.Add(encodePageToken(7))
	f.Add("")
	f.Add("YmVmb3JlOg")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := decodePageToken(s)
		if err == nil && s != "" && encodePageToken(id) != s {
			t.Fatalf("accepted a token it would not issue: %q", s)
		}
	})
}
