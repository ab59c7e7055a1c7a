package pgtest

import (
	"testing"
	"time"

	"github.com/millwright/millwright/pkg/devcert"
)

// SelfSignedCert returns a fresh self-signed server certificate for 127.0.0.1 and localhost and
// its key, PEM-encoded (tls.X509KeyPair takes them as they are). Tests serving TLS use it, and so
// does a cluster started with ClusterOptions.TLS: clients of such tests do not verify the
// certificate (sslmode=require), they only need the handshake to be real.
func SelfSignedCert(t testing.TB) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := selfSignedCert()
	if err != nil {
		t.Fatalf("pgtest: self-signed certificate: %v", err)
	}
	return certPEM, keyPEM
}

func selfSignedCert() (certPEM, keyPEM []byte, err error) {
	return devcert.New(time.Now(), 24*time.Hour)
}
