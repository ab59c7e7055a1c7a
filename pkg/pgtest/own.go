package pgtest

import "testing"

// ClusterOptions say how a cluster of a test's own (NewCluster) differs from the shared one.
type ClusterOptions struct {
	// TLS turns ssl on, with a fresh self-signed certificate (SelfSignedCert). Plain
	// connections are still accepted; sslmode=require gets TLS.
	TLS bool
	// MaxConnections replaces the shared cluster's 300 when set (benchmarks holding a
	// thousand sessions open).
	MaxConnections int
}

// NewCluster starts a cluster for t alone, from the same binaries as the shared one (it
// ignores TEST_DATABASE_URL), and stops it at the end of t. It returns the superuser's DSN on
// the "postgres" database (sslmode=disable). For tests that need a server set up differently
// (TLS, say): the shared cluster stays as every other test expects it.
func NewCluster(t testing.TB, opts ClusterOptions) string {
	t.Helper()
	c, err := startCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	return c.url("postgres")
}
