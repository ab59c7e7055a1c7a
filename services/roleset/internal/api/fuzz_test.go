package api

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/datatableref"
)

// FuzzResolveReference feeds the request fields a worker controls through the handler's
// parsing step: it never panics, every refusal is InvalidArgument MALFORMED_REFERENCE, and
// every acceptance is unambiguous (never role and viewer at once), canonical (its String
// parses back to itself) and never a fallback (a reference that names a role or asks for the
// viewer is never accepted as the default role).
func FuzzResolveReference(f *testing.F) {
	for _, s := range []string{"datatable://main", "datatable://main?role=a", "datatable://main?as=viewer",
		"datatable://main?as=owner", "datatable://main?role=a&as=viewer", "datatable://main?role=", "datatable://main?role=a&role=a",
		"datatable://main?ROLE=a", "datatable://", "datatable://main?", "datatable://main?role=admin", "datatable://a%20b",
		"datatable://main?as=viewer&x=1", "datatable://main?role=$viewer", "datatable://u:pw@main"} {
		f.Add(s, "", "")
	}
	f.Add("", "main", "$viewer")
	f.Add("", "main", "")
	f.Add("", "main", "admin")
	f.Add("", "", "r")
	f.Add("datatable://main", "main", "")
	f.Fuzz(func(t *testing.T, ref, datatable, role string) {
		r, err := parseRef(&rolesetv1.ResolveConnectionRequest{Reference: ref, Datatable: datatable, Role: role})
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v for %q/%q/%q", status.Code(err), ref, datatable, role)
			}
			if reason, _ := errs.Reason(err); reason != commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE {
				t.Fatalf("reason %v", reason)
			}
			return
		}
		if r.AsViewer && r.Role != "" {
			t.Fatalf("both viewer and role: %+v", r)
		}
		if ref != "" && (datatable != "" || role != "") {
			t.Fatal("accepted both forms")
		}
		back, err := datatableref.Parse(r.String())
		if err != nil || back != r {
			t.Fatalf("not canonical: %+v -> %q -> %+v, %v", r, r.String(), back, err)
		}
		if r.Role == "" && !r.AsViewer && (role != "" || containsAny(ref, "?")) {
			t.Fatalf("fell back to the default role: %q/%q/%q -> %+v", ref, datatable, role, r)
		}
	})
}

func containsAny(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(chars); j++ {
			if s[i] == chars[j] {
				return true
			}
		}
	}
	return false
}
