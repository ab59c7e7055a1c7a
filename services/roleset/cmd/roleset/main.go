// Command roleset serves the roleset service (serve) or migrates its database (migrate).
package main

import (
	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/services/roleset/internal/app"
)

func main() {
	cli.Main("roleset",
		cli.Command{Name: "serve", Usage: "serve gRPC", Run: app.Serve},
		cli.Command{Name: "migrate", Usage: "apply the database migrations", Run: app.Migrate})
}
