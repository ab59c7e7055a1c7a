package servicetest

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports for processes under test are drawn below Linux's ephemeral range (32768-60999 by
// default), never from it by binding :0: a port the kernel handed out that way and that was
// closed again is free for the source port of any outgoing connection, and with every service
// connecting to Postgres and to each other under load, one took a service's port before the
// service bound it (an end-to-end stack whose roleset never listened, twice in a day). Ports
// handed out are remembered, so the tests of one process never share one; another process
// drawing the same port is caught by the bind check, except in the moment between the check
// and the service's own bind.
const portLow, portHigh = 20000, 32000

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreeRun(t, 1))
}

// FreeRun returns the first of k consecutive ports that were free a moment ago (a service
// whose metrics ports are a base and the next ones needs a run).
func FreeRun(t testing.TB, k int) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 10000 {
		p := portLow + rand.IntN(portHigh-portLow-k)
		ok := true
		for i := range k {
			ok = ok && !portsUsed[p+i] && bindable(p+i)
		}
		if ok {
			for i := range k {
				portsUsed[p+i] = true
			}
			return p
		}
	}
	t.Fatalf("no %d free ports in a row in %d-%d", k, portLow, portHigh)
	return 0
}

// bindable reports whether nothing listens on port now.
func bindable(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
