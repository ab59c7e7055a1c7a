package apidesc_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/millwright/millwright/pkg/apidesc"
)

// TestEveryContractElementIsDocumented walks the documented descriptors of every millwright
// file: each service, RPC, message, field, enum and enum value carries a comment, so grpcurl
// describe and the OpenAPI document explain the whole contract.
func TestEveryContractElementIsDocumented(t *testing.T) {
	files, err := apidesc.Files()
	require.NoError(t, err)
	var checked int
	var missing []string
	need := func(d protoreflect.Descriptor) {
		checked++
		loc := d.ParentFile().SourceLocations().ByDescriptor(d)
		if strings.TrimSpace(loc.LeadingComments+loc.TrailingComments) == "" {
			missing = append(missing, string(d.FullName()))
		}
	}
	enum := func(e protoreflect.EnumDescriptor) {
		need(e)
		for i := 0; i < e.Values().Len(); i++ {
			need(e.Values().Get(i))
		}
	}
	// A scope is a file or a message: both declare messages and enums inside them.
	type scope interface {
		Messages() protoreflect.MessageDescriptors
		Enums() protoreflect.EnumDescriptors
	}
	var nested func(d scope)
	nested = func(d scope) {
		for i := 0; i < d.Messages().Len(); i++ {
			m := d.Messages().Get(i)
			if m.IsMapEntry() {
				continue
			}
			need(m)
			for j := 0; j < m.Fields().Len(); j++ {
				need(m.Fields().Get(j))
			}
			nested(m)
		}
		for i := 0; i < d.Enums().Len(); i++ {
			enum(d.Enums().Get(i))
		}
	}
	files.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(f.Path(), "millwright/") {
			return true
		}
		require.Positive(t, f.SourceLocations().Len(), "%s has no source info", f.Path())
		for i := 0; i < f.Services().Len(); i++ {
			s := f.Services().Get(i)
			need(s)
			for j := 0; j < s.Methods().Len(); j++ {
				need(s.Methods().Get(j))
			}
		}
		nested(f)
		return true
	})
	require.Greater(t, checked, 400, "the walk saw the contracts")
	require.Empty(t, missing, "undocumented contract elements")
}
