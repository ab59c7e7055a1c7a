package validate

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
)

// Rule names: stable strings clients may branch on (ErrorInfo metadata "rule").
const (
	RuleRequired = "required"
	RuleMaxLen   = "max_len"
	RuleOneOf    = "one_of"
	RuleMaxItems = "max_items"
	RuleMin      = "min"
	RuleMax      = "max"
	RuleUTF8     = "utf8"
)

// FieldError is a violation a validator may return instead of calling errs.InvalidField;
// Registry.Validate turns it into the same status. It is also a status itself (GRPCStatus),
// so it can be returned from anywhere.
type FieldError struct {
	Field   string
	Rule    string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// GRPCStatus implements the interface grpc-go and status.FromError look for.
func (e *FieldError) GRPCStatus() *status.Status {
	st, _ := status.FromError(e.status())
	return st
}

func (e *FieldError) status() error { return errs.InvalidField(e.Field, e.Rule, e.Message) }

// First returns the first non-nil error: `return validate.First(Required(..), MaxLen(..))`
// reads as the list of rules of a message.
func First(checks ...error) error {
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

// Required refuses an empty (or all-blank) string.
func Required(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return errs.InvalidField(field, RuleRequired, field+" is required")
	}
	return nil
}

// MaxLen refuses a string of more than n characters (runes), or invalid UTF-8.
func MaxLen(field, v string, n int) error {
	if !utf8.ValidString(v) {
		return errs.InvalidField(field, RuleUTF8, field+" is not valid UTF-8")
	}
	if utf8.RuneCountInString(v) > n {
		return errs.InvalidField(field, RuleMaxLen, fmt.Sprintf("%s is longer than %d characters", field, n))
	}
	return nil
}

// Pattern refuses a string that re does not match, under the caller's rule name, and an empty
// one as RuleRequired (it used to let "" through, which made every optional-looking use a
// required field that was not checked). re should be anchored (^...$). Names that more than
// one service takes have their own rule in fields.go; use Pattern only for a field of one
// service.
func Pattern(field, v string, re *regexp.Regexp, rule string) error {
	if err := Required(field, v); err != nil {
		return err
	}
	if !re.MatchString(v) {
		return errs.InvalidField(field, rule, fmt.Sprintf("%s does not match the %s format", field, rule))
	}
	return nil
}

// OneOf refuses a value outside allowed.
func OneOf[T comparable](field string, v T, allowed ...T) error {
	if !slices.Contains(allowed, v) {
		return errs.InvalidField(field, RuleOneOf, fmt.Sprintf("%s must be one of %v", field, allowed))
	}
	return nil
}

// MaxEntries refuses a map of more than n entries.
func MaxEntries[K comparable, V any](field string, m map[K]V, n int) error {
	if len(m) > n {
		return errs.InvalidField(field, RuleMaxItems, fmt.Sprintf("%s has more than %d entries", field, n))
	}
	return nil
}

// MaxItems refuses a list of more than n items.
func MaxItems[T any](field string, items []T, n int) error {
	if len(items) > n {
		return errs.InvalidField(field, RuleMaxItems, fmt.Sprintf("%s has more than %d items", field, n))
	}
	return nil
}

// Min refuses v < min.
func Min[T int | int32 | int64 | uint32 | uint64](field string, v, min T) error {
	if v < min {
		return errs.InvalidField(field, RuleMin, fmt.Sprintf("%s must be at least %v", field, min))
	}
	return nil
}

// Max refuses v > max.
func Max[T int | int32 | int64 | uint32 | uint64](field string, v, max T) error {
	if v > max {
		return errs.InvalidField(field, RuleMax, fmt.Sprintf("%s must be at most %v", field, max))
	}
	return nil
}

// Each runs fn on every item with the item's field path ("kinds[2]") and returns the first
// error, so a violation names the exact element.
func Each[T any](field string, items []T, fn func(field string, item T) error) error {
	for i, it := range items {
		if err := fn(fmt.Sprintf("%s[%d]", field, i), it); err != nil {
			return err
		}
	}
	return nil
}
