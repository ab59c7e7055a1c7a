// Command demo loads the demo `make run` starts with into a running stack, over the services'
// own gRPC APIs: a workspace with an admin, a developer, two operators, groups, folders,
// scripts, flows and worker tags (policy); a data table over a target database under
// row-level security, three roles and their tenants (roleset); builder rights off. It writes
// the tokens it made to the run directory (one file each, mode 600) and prints them with a
// short "try this" list. Every step is an upsert or treats "already exists" as done, and a
// token still valid in the run directory is reused, so loading twice changes nothing.
package main

import (
	"context"
	"flag"
	"time"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

func main() {
	cli.Main("demo", cli.Command{Name: "load", Usage: "load (or refresh) the demo into a running stack", Run: load})
}

func load(ctx context.Context, args []string) error {
	var c config
	var admin, service server.Secret
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	server.SecretVar(fs, &admin, "admin-token", "MILLWRIGHT_ADMIN_TOKEN", "", "superadmin token of the stack")
	server.SecretVar(fs, &service, "service-token", "MILLWRIGHT_SERVICE_TOKEN", "", "service token of the stack")
	server.StringVar(fs, &c.policy, "policy-addr", "MILLWRIGHT_POLICY_ADDR", "127.0.0.1:50051", "policy gRPC address")
	server.StringVar(fs, &c.roleset, "roleset-addr", "MILLWRIGHT_ROLESET_ADDR", "127.0.0.1:50052", "roleset gRPC address")
	server.StringVar(fs, &c.billing, "billing-addr", "MILLWRIGHT_BILLING_ADDR", "127.0.0.1:50053", "billing gRPC address")
	server.StringVar(fs, &c.http, "http-addr", "MILLWRIGHT_HTTP_ADDR", "127.0.0.1:8080", "gateway address (waited for on /healthz)")
	server.StringVar(fs, &c.runDir, "run-dir", "MILLWRIGHT_RUN_DIR", ".run", "where the tokens are written")
	var target server.Secret
	server.SecretVar(fs, &target, "target-url", "MILLWRIGHT_DEMO_TARGET_URL", "",
		"the demo target database as its cluster admin: postgres://user:password@host:port/db")
	server.DurationVar(fs, &c.wait, "wait", "MILLWRIGHT_DEMO_WAIT", 90*time.Second, "how long to wait for the stack to be healthy")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	c.adminToken, c.serviceToken = admin.Reveal(), service.Reveal()
	if c.adminToken == "" || c.serviceToken == "" {
		return cli.Usagef("MILLWRIGHT_ADMIN_TOKEN and MILLWRIGHT_SERVICE_TOKEN are required")
	}
	t, err := parseTarget(target.Reveal())
	if err != nil {
		return cli.Usagef("%v", err)
	}
	c.target = t
	return run(ctx, c)
}
