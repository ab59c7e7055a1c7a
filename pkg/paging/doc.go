// Package paging is the one page size and page token of every List RPC of the read-back API
// (AIP-158): keyset paging, so a page costs the same however deep it is and a row written
// between two pages is neither skipped nor repeated within the order.
//
// A page token is opaque to clients: base64url of the last key of the page and a digest of
// the request's filters, so a token is refused with other filters (AIP-158: "the page token
// must be used with the same request") rather than silently answering another query. A token
// is not a secret and not a capability: every page is read under the caller's authorization,
// so a forged token only moves the caller within what it may read anyway. Decoding is strict
// (bounded length, exactly the bytes Encode makes), so a token is refused with
// InvalidArgument naming page_token, never half understood.
package paging
