package app

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// roleset devcert writes a certificate the proxy loads, with a key only its owner reads.
func TestDevCert(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "proxy-tls")
	require.NoError(t, writeDevCert(dir, time.Now()))
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, err := tls.LoadX509KeyPair(cert, key)
	require.NoError(t, err)
	st, err := os.Stat(key)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	c := &Config{ProxyAddr: "127.0.0.1:0", ProxyAdvertise: "127.0.0.1:55433", ProxyTLSCert: cert, ProxyTLSKey: key,
		TicketLifetime: time.Hour}
	p, tlsCfg, err := c.proxyConfig()
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", p.Host)
	require.Equal(t, 55433, p.Port)
	require.Equal(t, time.Hour, p.TicketLifetime)
	require.NotNil(t, tlsCfg)
}

// The proxy flags refuse what would hand jobs an address they cannot use, or half a TLS pair.
func TestProxyConfigRefuses(t *testing.T) {
	for name, c := range map[string]Config{
		"no host to advertise":     {ProxyAddr: ":5433"},
		"advertise without a port": {ProxyAddr: ":5433", ProxyAdvertise: "roleset.ns.svc"},
		"a port out of range":      {ProxyAddr: ":5433", ProxyAdvertise: "roleset:70000"},
		"a cert without a key":     {ProxyAddr: "127.0.0.1:5433", ProxyTLSCert: "cert.pem"},
		"an unreadable pair":       {ProxyAddr: "127.0.0.1:5433", ProxyTLSCert: "missing.pem", ProxyTLSKey: "missing.pem"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := c.proxyConfig()
			require.Error(t, err)
		})
	}
	p, tlsCfg, err := (&Config{}).proxyConfig()
	require.NoError(t, err, "no --proxy-addr: no proxy")
	require.Empty(t, p.Host)
	require.Nil(t, tlsCfg)
}
