package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	bf "github.com/millwright/millwright/pkg/builderfixture"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// The builder fixtures (services/policy/internal/builder/testdata, format in its README) are
// replayed here over gRPC against the real service and real Postgres; gateway/e2e replays the
// same files over REST through the real gateway. Both compare against the files, so both
// transports reach identical decisions (codes, reasons, docs, pointers). Reading the files,
// applying the setup, making the call and checking the answer are pkg/builderfixture.

func TestBuilderFixturesGRPC(t *testing.T) {
	sf, cases := bf.Load(t, "../builder/testdata")
	r := startReplica(t, testdb.DSN(t))
	bf.Apply(t, admin, r.conn, sf.Setup)
	require.Greater(t, len(cases), 100)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			// The service token acts for the case's caller (on_behalf_of), as the platform does.
			bf.Check(t, c, bf.Call(t, service, r.conn, c))
		})
	}
}
