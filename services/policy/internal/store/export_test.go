package store

// AuthenticateSQL is authenticate's statement, for the benchmark that plans it against many
// partitions.
const AuthenticateSQL = authenticateSQL
