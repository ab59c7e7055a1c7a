// Command roleset serves the roleset service (serve) or migrates its database (migrate).
package main

import (
	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/services/roleset/internal/app"
)

func main() { cli.Main("roleset", app.Commands()...) }
