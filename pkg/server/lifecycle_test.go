package server_test

import (
	"context"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

// A service whose Complete acquires a, b, c in that order and then fails, or returns a runner.
type fakeService struct {
	t        *testing.T
	cfg      server.Config
	failAt   int // 0: complete; n: fail after acquiring n resources
	released []string
	ran      bool
}

func (f *fakeService) RegisterFlags(fs *flag.FlagSet) {
	f.cfg.RegisterFlags(fs, server.Config{Name: "fake"})
}

func (f *fakeService) Complete(_ context.Context, c *server.Closers) (server.Runner, error) {
	for i, name := range []string{"pool", "upstream", "cache"} {
		if f.failAt == i {
			return nil, errors.New("cannot acquire " + name)
		}
		c.Push(func() { f.released = append(f.released, name) })
	}
	return func(context.Context) error {
		f.ran = true
		assert.Empty(f.t, f.released, "nothing is released while the service runs")
		return nil
	}, nil
}

// Serve releases what Complete acquired, last acquired first, after the run and also when
// Complete fails half-way.
func TestServeReleasesInReverseOrder(t *testing.T) {
	ok := &fakeService{t: t, failAt: -1}
	require.NoError(t, server.Serve(context.Background(), ok))
	assert.True(t, ok.ran)
	assert.Equal(t, []string{"cache", "upstream", "pool"}, ok.released)

	half := &fakeService{t: t, failAt: 2}
	require.ErrorContains(t, server.Serve(context.Background(), half), "cannot acquire cache")
	assert.False(t, half.ran)
	assert.Equal(t, []string{"upstream", "pool"}, half.released, "a failed completion releases what it got")
}

// Every binary's subcommands are the same three, and migrate and audit refuse to run without a
// database.
func TestCommands(t *testing.T) {
	migrated := ""
	cmds := server.Commands("fake", "serve fake", func() server.Service { return &fakeService{t: t, failAt: -1} },
		func(_ context.Context, dsn string) (int64, error) { migrated = dsn; return 7, nil })
	require.Len(t, cmds, 3)
	assert.Equal(t, "serve", cmds[0].Name)
	assert.Equal(t, "migrate", cmds[1].Name)
	assert.Equal(t, "audit", cmds[2].Name)

	t.Setenv("DATABASE_URL", "")
	var uerr *cli.UsageError
	require.ErrorAs(t, cmds[1].Run(context.Background(), nil), &uerr, "no --database-url is a usage error")
	require.ErrorAs(t, cmds[2].Run(context.Background(), []string{"verify"}), &uerr, "no --database-url is a usage error")
	require.NoError(t, cmds[1].Run(context.Background(), []string{"--database-url", "postgres://h/db"}))
	assert.Equal(t, "postgres://h/db", migrated)

	require.NoError(t, cmds[0].Run(context.Background(), []string{"--grpc-addr", "127.0.0.1:0"}))
	require.ErrorAs(t, cmds[0].Run(context.Background(), []string{"--no-such-flag"}), &uerr)
}
