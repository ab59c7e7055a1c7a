package client_test

import (
	"context"
	"log"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/pkg/client"
)

// A worker resolves the connection a job asked for and opens it with pgx. The job token is
// the run's: roleset decides from it who the viewer is. The connection is logged without its
// password; only DSN carries it.
func Example() {
	ctx := context.Background()
	c, err := client.New(ctx, client.Options{
		RolesetAddr: "roleset:50052",
		PolicyAddr:  "policy:50051",
		Token:       "the worker's service token",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	jobToken := "the job token the platform handed to this run"
	conn, err := c.ResolveConnection(ctx, jobToken, "datatable://main?as=viewer")
	if err != nil {
		// A refusal is final: fail the job with its reason (NO_ROLE, NO_VIEWER, ...).
		log.Fatalf("no connection (%s): %v", client.Reason(err), err)
	}
	slog.Info("connecting", "conn", conn) // password=[REDACTED]

	db, err := pgx.Connect(ctx, conn.DSN())
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close(ctx)
	// ... run the job's queries: row-level security answers as the viewer ...
}
