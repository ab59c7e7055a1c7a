// Command policy serves the policy service (serve) or migrates its database (migrate).
package main

import (
	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/services/policy/internal/app"
)

func main() { cli.Main("policy", app.Commands()...) }
