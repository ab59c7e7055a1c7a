package failpoint

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// hitCall is a failpoint site as written in source: failpoint.Hit("name").
var hitCall = regexp.MustCompile(`failpoint\.Hit\("([^"]+)"\)`)

// Sites returns the sorted names of every failpoint.Hit site in the Go files (tests left
// out) under the given directories: what a service's Names list must equal, checked by its
// test, so a harness picking from Names can reach every site and no name is stale.
func Sites(dirs ...string) ([]string, error) {
	var names []string
	for _, root := range dirs {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range hitCall.FindAllStringSubmatch(string(b), -1) {
				names = append(names, m[1])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}

// CheckNames returns an error naming the differences between a service's list of failpoints
// and the sites under dirs (Sites): a site the list lacks, or a listed name with no site.
func CheckNames(names []string, dirs ...string) error {
	sites, err := Sites(dirs...)
	if err != nil {
		return err
	}
	var missing, stale []string
	for _, s := range sites {
		if !slices.Contains(names, s) {
			missing = append(missing, s)
		}
	}
	for _, n := range names {
		if !slices.Contains(sites, n) {
			stale = append(stale, n)
		}
	}
	if len(missing)+len(stale) > 0 {
		return fmt.Errorf("failpoints: sites not listed: %v; listed without a site: %v", missing, stale)
	}
	return nil
}
