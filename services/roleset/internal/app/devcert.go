package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/millwright/millwright/pkg/cli"
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"millwright development"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("devcert: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
