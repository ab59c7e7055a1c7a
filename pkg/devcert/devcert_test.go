package devcert

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A certificate New makes is a usable pair that a client trusting it accepts for localhost and
// 127.0.0.1, within its validity only.
func TestNew(t *testing.T) {
	now := time.Now()
	certPEM, keyPEM, err := New(now, 24*time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	for _, name := range []string{"localhost", "127.0.0.1"} {
		_, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: now})
		require.NoError(t, err, name)
	}
	_, err = cert.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: pool, CurrentTime: now.Add(25 * time.Hour)})
	require.Error(t, err, "expired after validFor")
}
