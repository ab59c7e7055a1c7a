package authn

// CacheStats reports the token cache's hits and misses (metrics).
func (l *Local) CacheStats() (hits, misses uint64) { return l.cache.Stats() }
