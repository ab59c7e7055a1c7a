package stream

import "time"

// Test-only hooks (compiled only into this package's tests).

const ListenerAppName = listenerAppName

// SetWatchBuffer shrinks Watch's live queue so tests can exercise the lagging path.
func SetWatchBuffer(s *Stream, n int) { s.watchBuffer = n }

// DisableListen makes the listener rely on polling only (the benchmark's baseline).
func DisableListen(s *Stream) { s.noListen = true }

// SetMinReconnect sets the listener's first reconnect delay (jittered down to half of it).
func SetMinReconnect(s *Stream, d time.Duration) { s.minReconnect = d }
