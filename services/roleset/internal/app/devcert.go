package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/devcert"
)

// devCertCommand writes a self-signed certificate for the proxy's TLS on a developer's machine
// (`make run`): a machine that has only Go and PostgreSQL has no openssl to make one. Never for
// production, where the certificate comes from the deployment's secret (docs/operations.md).
func devCertCommand() cli.Command {
	return cli.Command{Name: "devcert", Usage: "write a self-signed localhost certificate for the proxy (development only)",
		Run: func(_ context.Context, args []string) error {
			fs := flag.NewFlagSet("devcert", flag.ContinueOnError)
			dir := fs.String("dir", "", "directory to write cert.pem and key.pem into (key mode 0600)")
			if err := fs.Parse(args); err != nil || *dir == "" {
				return cli.Usagef("devcert --dir DIR")
			}
			return writeDevCert(*dir, time.Now())
		}}
}

func writeDevCert(dir string, now time.Time) error {
	certPEM, keyPEM, err := devcert.New(now, 365*24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600); err != nil {
		return fmt.Errorf("devcert: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o644)
}
