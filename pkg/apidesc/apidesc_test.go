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
	var message func(m protoreflect.MessageDescriptor)
	enum := func(e protoreflect.EnumDescriptor) {
		need(e)
		for i := 0; i < e.Values().Len(); i++ {
			need(e.Values().Get(i))
		}
	}
	message = func(m protoreflect.MessageDescriptor) {
		if m.IsMapEntry() {
			return
		}
		need(m)
		for i := 0; i < m.Fields().Len(); i++ {
			need(m.Fields().Get(i))
		}
		for i := 0; i < m.Messages().Len(); i++ {
			message(m.Messages().Get(i))
		}
		for i := 0; i < m.Enums().Len(); i++ {
			enum(m.Enums().Get(i))
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
		for i := 0; i < f.Messages().Len(); i++ {
			message(f.Messages().Get(i))
		}
		for i := 0; i < f.Enums().Len(); i++ {
			enum(f.Enums().Get(i))
		}
		return true
	})
	require.Greater(t, checked, 400, "the walk saw the contracts")
	require.Empty(t, missing, "undocumented contract elements")
}
