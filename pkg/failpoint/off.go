//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with the failpoints tag.
const Enabled = false

// Hit does nothing: failpoints exist only in the fault build (the failpoints tag).
func Hit(string) {}
