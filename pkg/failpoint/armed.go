package failpoint

import (
	"strconv"
	"strings"
)

// EnvVar arms a failpoint in a binary of the fault build: "name" fires on the first hit,
// "name:n" on the n-th.
const EnvVar = "MILLWRIGHT_FAILPOINT"

// Arm is the environment entry that arms name on its n-th hit (n < 1: the first).
func Arm(name string, n int) string {
	if n < 1 {
		n = 1
	}
	return EnvVar + "=" + name + ":" + strconv.Itoa(n)
}

// parseArmed reads EnvVar's value: the name and which hit fires (1 when not given). A count
// that is not a positive number arms nothing, so a typo never kills on the wrong hit.
func parseArmed(v string) (string, int) {
	name, nth, ok := strings.Cut(strings.TrimSpace(v), ":")
	if !ok {
		return name, 1
	}
	n, err := strconv.Atoi(nth)
	if err != nil || n < 1 {
		return "", 0
	}
	return name, n
}
