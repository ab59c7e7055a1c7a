// Package secret holds the service's secret handling: AES-256-GCM encryption of passwords at
// rest under a key ring (a key id prefixes every ciphertext so keys can be rotated without a
// flag day), random passwords, and client-built SCRAM-SHA-256 verifiers so a plaintext password
// never appears in DDL text (log_statement=ddl would log it), taken apart again (ScramKeys) for
// the server side of SCRAM in roleset's proxy. It imports neither gRPC nor pgx.
package secret
