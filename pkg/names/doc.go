// Package names is the one definition of every name and identifier the services take from a
// request: workspace ids, usernames, emails, group and folder names, runnable paths, cluster
// ids, hosts and PostgreSQL identifiers. Each is a pure predicate (no gRPC, so domain code may
// call it); pkg/validate turns each into the request rule all three services use, with one
// stable rule name per field, so the same bad value is refused everywhere with the same reason.
//
// Names are refused, never repaired: a value that is not already in its one canonical form
// (an upper-case letter in an email, a no-break space, a look-alike such as U+212A KELVIN SIGN)
// is an error, because folding it would let two spellings name one principal, or one
// spelling name two, depending on which service did the folding.
package names
