package settings

// CacheStats reports the builder-flag cache's hits and misses (metrics).
func (s *Service) CacheStats() (hits, misses uint64) { return s.cache.Stats() }
