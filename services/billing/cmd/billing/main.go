// Command billing serves the billing gRPC API (seat usage, cap, checks, reports) and keeps its
// projection of policy's members current (serve), or migrates its database (migrate).
package main

import (
	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/services/billing/internal/app"
)

func main() { cli.Main("billing", app.Commands()...) }
