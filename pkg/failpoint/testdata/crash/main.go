// Command crash hits failpoint "test/step" three times, printing before each hit, so the
// package's test can see which hit killed it (built with and without the failpoints tag).
package main

import (
	"fmt"
	"os"

	"github.com/millwright/millwright/pkg/failpoint"
)

func main() {
	for i := 1; i <= 3; i++ {
		fmt.Fprintln(os.Stdout, i)
		failpoint.Hit("test/step")
		failpoint.Hit("test/other")
	}
	fmt.Fprintln(os.Stdout, "done")
}
