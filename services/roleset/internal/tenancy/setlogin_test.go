package tenancy

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

var setLoginRE = regexp.MustCompile(`^wm_set_[0-9a-f]{40}$`)

func TestSetLoginName(t *testing.T) {
	name, err := SetLoginName("inst-a", []uint32{16384, 16390, 20001})
	require.NoError(t, err)

	t.Run("format", func(t *testing.T) {
		assert.Regexp(t, setLoginRE, name)
		assert.Len(t, name, 47)
		assert.LessOrEqual(t, len(name), rolename.MaxLen)
		var re *rolename.Error
		require.ErrorAs(t, rolename.Validate(name), &re, "set logins cannot be catalog roles")
		assert.Equal(t, rolename.RuleReservedPrefix, re.Rule)
	})

	t.Run("stable across releases", func(t *testing.T) {
		// Pinned: changing the derivation orphans every existing login.
		assert.Equal(t, "wm_set_"+pinnedHash, name)
	})

	t.Run("order and duplicates do not matter", func(t *testing.T) {
		for _, oids := range [][]uint32{
			{20001, 16384, 16390},
			{16390, 20001, 16384, 16384},
			{16384, 16384, 16390, 20001, 20001},
		} {
			got, err := SetLoginName("inst-a", oids)
			require.NoError(t, err)
			assert.Equal(t, name, got)
		}
	})

	t.Run("rename invariance: same oids different names same login", func(t *testing.T) {
		before := []Role{{Name: "sales_emea", OID: 16384}, {Name: "r001", OID: 16390}}
		after := []Role{{Name: "emea_sales", OID: 16384}, {Name: "reports", OID: 16390}}
		a, err := SetLoginName("inst-a", oidsOf(before))
		require.NoError(t, err)
		b, err := SetLoginName("inst-a", oidsOf(after))
		require.NoError(t, err)
		assert.Equal(t, a, b)
	})

	t.Run("instances on one cluster never share", func(t *testing.T) {
		other, err := SetLoginName("inst-b", []uint32{16384, 16390, 20001})
		require.NoError(t, err)
		assert.NotEqual(t, name, other)
	})

	t.Run("instance id and oids cannot be shifted into each other", func(t *testing.T) {
		a, err := SetLoginName("x\x00\x00\x00\x01", []uint32{2})
		require.NoError(t, err)
		b, err := SetLoginName("x", []uint32{1, 2})
		require.NoError(t, err)
		assert.NotEqual(t, a, b)
	})

	t.Run("different sets differ", func(t *testing.T) {
		seen := map[string]bool{name: true}
		for _, oids := range [][]uint32{{16384}, {16384, 16390}, {16384, 20001}, {16390, 20001}, {16384, 16390, 20002}} {
			got, err := SetLoginName("inst-a", oids)
			require.NoError(t, err)
			assert.False(t, seen[got], "collision for %v", oids)
			seen[got] = true
		}
	})

	t.Run("input not mutated", func(t *testing.T) {
		in := []uint32{3, 1, 2, 1}
		_, err := SetLoginName("inst-a", in)
		require.NoError(t, err)
		assert.Equal(t, []uint32{3, 1, 2, 1}, in)
	})

	t.Run("errors", func(t *testing.T) {
		_, err := SetLoginName("inst-a", nil)
		require.ErrorIs(t, err, ErrNoOIDs)
		_, err = SetLoginName("inst-a", []uint32{})
		require.ErrorIs(t, err, ErrNoOIDs)
		_, err = SetLoginName("", []uint32{1})
		require.ErrorIs(t, err, ErrNoInstance)
		_, err = SetLoginName("inst-a", []uint32{5, 0})
		assert.ErrorIs(t, err, ErrInvalidOID)
	})
}

// pinnedHash is SetLoginName("inst-a", {16384, 16390, 20001}) without the prefix, computed
// independently (Python hashlib) from the documented derivation.
const pinnedHash = "75b240bb3d1f3d3b990f5e57d320129ba1383589"

func oidsOf(rs []Role) []uint32 {
	out := make([]uint32, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.OID)
	}
	return out
}

func FuzzSetLoginName(f *testing.F) {
	f.Add("inst-a", uint32(16384), uint32(16390), uint32(20001))
	f.Add("", uint32(1), uint32(1), uint32(0))
	f.Fuzz(func(t *testing.T, inst string, a, b, c uint32) {
		name, err := SetLoginName(inst, []uint32{a, b, c})
		if err != nil {
			if inst != "" && a != 0 && b != 0 && c != 0 {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if !setLoginRE.MatchString(name) {
			t.Fatalf("bad name %q", name)
		}
		again, err := SetLoginName(inst, []uint32{c, a, b, a})
		if err != nil || again != name {
			t.Fatalf("permutation changed the name: %q vs %q (%v)", name, again, err)
		}
	})
}
