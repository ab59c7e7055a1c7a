package validate_test

import (
	"errors"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/validate"
)

func watchRules(r *policyv1.WatchRequest) error {
	return validate.First(
		validate.Min("after_id", r.GetAfterId(), -1),
		validate.MaxItems("kinds", r.GetKinds(), 3),
		validate.Each("kinds", r.GetKinds(), func(field, k string) error {
			return validate.First(validate.Required(field, k), validate.MaxLen(field, k, 8))
		}),
	)
}

// fieldRule returns the field and rule of an InvalidField error, checking both details.
func fieldRule(t *testing.T, err error) (string, string) {
	t.Helper()
	st := status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	reason, ok := errs.Reason(err)
	require.True(t, ok)
	require.Equal(t, commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD, reason)
	md := errs.Infos(err)[0].GetMetadata()
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && md["field"] != "" {
			require.Equal(t, md["field"], br.GetFieldViolations()[0].GetField())
		}
	}
	return md["field"], md["rule"]
}

func TestValidate(t *testing.T) {
	r := validate.NewRegistry()
	validate.Add(r, watchRules)

	cases := []struct {
		name        string
		req         *policyv1.WatchRequest
		field, rule string
	}{
		{"valid", &policyv1.WatchRequest{AfterId: 5, Kinds: []string{"member"}}, "", ""},
		{"after_id too low", &policyv1.WatchRequest{AfterId: -2}, "after_id", validate.RuleMin},
		{"too many kinds", &policyv1.WatchRequest{Kinds: []string{"a", "b", "c", "d"}}, "kinds", validate.RuleMaxItems},
		{"empty kind", &policyv1.WatchRequest{Kinds: []string{"a", " "}}, "kinds[1]", validate.RuleRequired},
		{"long kind", &policyv1.WatchRequest{Kinds: []string{"abcdefghi"}}, "kinds[0]", validate.RuleMaxLen},
		{"bad utf8", &policyv1.WatchRequest{Kinds: []string{"\xff"}}, "kinds[0]", validate.RuleUTF8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Validate(tc.req)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			field, rule := fieldRule(t, err)
			assert.Equal(t, tc.field, field)
			assert.Equal(t, tc.rule, rule)
		})
	}
}

func TestFailClosed(t *testing.T) {
	r := validate.NewRegistry()
	err := r.Validate(&policyv1.WatchRequest{})
	require.Equal(t, codes.Internal, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "no validator for millwright.policy.v1.WatchRequest")
	require.Equal(t, codes.Internal, status.Code(r.Validate("not a message")))
}

func TestMissing(t *testing.T) {
	r := validate.NewRegistry()
	assert.Equal(t, []string{"millwright.policy.v1.WatchRequest", "millwright.roleset.v1.WatchRequest"},
		r.Missing(policyv1.EventService_ServiceDesc, rolesetv1.EventService_ServiceDesc))
	validate.Add(r, watchRules)
	assert.Equal(t, []string{"millwright.roleset.v1.WatchRequest"},
		r.Missing(policyv1.EventService_ServiceDesc, rolesetv1.EventService_ServiceDesc))
	assert.Empty(t, r.Missing(policyv1.EventService_ServiceDesc))
}

func TestAddTwicePanics(t *testing.T) {
	r := validate.NewRegistry()
	validate.Add(r, watchRules)
	assert.Panics(t, func() { validate.Add(r, watchRules) })
}

func TestValidatorResultKinds(t *testing.T) {
	cases := []struct {
		name string
		fn   func(*policyv1.WatchRequest) error
		rule string
	}{
		{"field error", func(*policyv1.WatchRequest) error {
			return &validate.FieldError{Field: "kinds", Rule: "custom", Message: "nope"}
		}, "custom"},
		{"plain error is still bad input", func(*policyv1.WatchRequest) error { return errors.New("bad") }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := validate.NewRegistry()
			validate.Add(r, tc.fn)
			_, rule := fieldRule(t, r.Validate(&policyv1.WatchRequest{}))
			assert.Equal(t, tc.rule, rule)
		})
	}
}

func TestHelpers(t *testing.T) {
	name := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	cases := []struct {
		name string
		err  error
		rule string
	}{
		{"pattern ok", validate.Pattern("f", "ab_1", name, "identifier"), ""},
		{"pattern empty refused", validate.Pattern("f", "", name, "identifier"), validate.RuleRequired},
		{"pattern blank refused", validate.Pattern("f", " ", name, "identifier"), validate.RuleRequired},
		{"map entries ok", validate.MaxEntries("m", map[string]int{"a": 1}, 1), ""},
		{"map entries bad", validate.MaxEntries("m", map[string]int{"a": 1, "b": 2}, 1), validate.RuleMaxItems},
		{"pattern bad", validate.Pattern("f", "1ab", name, "identifier"), "identifier"},
		{"one of ok", validate.OneOf("op", "insert", "insert", "delete"), ""},
		{"one of bad", validate.OneOf("op", "drop", "insert", "delete"), validate.RuleOneOf},
		{"max ok", validate.Max("n", 3, 3), ""},
		{"max bad", validate.Max("n", 4, 3), validate.RuleMax},
		{"max len counts runes", validate.MaxLen("f", "ééé", 3), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rule == "" {
				require.NoError(t, tc.err)
				return
			}
			_, rule := fieldRule(t, tc.err)
			assert.Equal(t, tc.rule, rule)
		})
	}
}
