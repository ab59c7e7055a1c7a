package seats

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MilliPerSeat is how many milli-seats make one seat.
const MilliPerSeat = 1000

// Role is a member's role in one workspace.
type Role string

// The roles policy knows. Admins and developers author; operators only run, unless their
// workspace grants builder rights.
const (
	RoleAdmin     Role = "admin"
	RoleDeveloper Role = "developer"
	RoleOperator  Role = "operator"
)

// ParseRole accepts policy's role names in any case ("Admin", "operator", "ROLE_OPERATOR").
func ParseRole(s string) (Role, error) {
	switch r := Role(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "role_")); r {
	case RoleAdmin, RoleDeveloper, RoleOperator:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q", s)
}

// Weights are the milli-seats one user of each class costs.
type Weights struct {
	AuthorMilli   int64
	OperatorMilli int64
}

// DefaultWeights is Windmill's rule: an author is one seat, an operator-only user half a seat.
var DefaultWeights = Weights{AuthorMilli: 1000, OperatorMilli: 500}

// Validate refuses weights that would make seat counts meaningless.
func (w Weights) Validate() error {
	if w.AuthorMilli <= 0 || w.OperatorMilli < 0 {
		return errors.New("seat weights: author must be > 0 and operator >= 0")
	}
	if w.OperatorMilli > w.AuthorMilli {
		return errors.New("seat weights: an operator cannot cost more than an author")
	}
	return nil
}

// ParseSeats parses a decimal number of seats ("1", "0.5", "0.333") into milli-seats. More
// than three decimals is refused rather than rounded, so configuration never silently changes.
func ParseSeats(s string) (int64, error) {
	s = strings.TrimSpace(s)
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" && !hasFrac || strings.HasPrefix(whole, "-") || strings.HasPrefix(whole, "+") {
		return 0, fmt.Errorf("invalid seat amount %q: want a non-negative decimal", s)
	}
	if len(frac) > 3 {
		return 0, fmt.Errorf("invalid seat amount %q: at most 3 decimals", s)
	}
	var w int64
	if whole != "" {
		v, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || v > 1<<40 {
			return 0, fmt.Errorf("invalid seat amount %q", s)
		}
		w = v
	}
	var f int64
	if frac != "" {
		v, err := strconv.ParseUint(frac+strings.Repeat("0", 3-len(frac)), 10, 16)
		if err != nil {
			return 0, fmt.Errorf("invalid seat amount %q", s)
		}
		f = int64(v)
	}
	return w*MilliPerSeat + f, nil
}

// FormatMilli renders milli-seats as a decimal number of seats: 12500 -> "12.5".
func FormatMilli(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	whole, frac := m/MilliPerSeat, m%MilliPerSeat
	if frac == 0 {
		return sign + strconv.FormatInt(whole, 10)
	}
	return sign + strings.TrimRight(fmt.Sprintf("%d.%03d", whole, frac), "0")
}

// Usage is one count of seats.
type Usage struct {
	Authors    int64
	Operators  int64
	MilliSeats int64
}

// Price is a change priced by counting twice in one snapshot.
type Price struct {
	Before, After Usage
	CapSeats      int64 // 0: no cap
	Position      int64 // policy stream position the counts are consistent with
}

// Delta is what the change costs in milli-seats (negative when it frees seats).
func (p Price) Delta() int64 { return p.After.MilliSeats - p.Before.MilliSeats }

// Allowed is the cap rule: with no cap anything goes; a change that adds no seats is always
// allowed (re-enabling builder rights, or a workspace whose operators all author elsewhere,
// even when usage is already at or over the cap); otherwise the result must fit the cap.
func (p Price) Allowed() bool {
	return p.CapSeats == 0 || p.Delta() <= 0 || p.After.MilliSeats <= p.CapSeats*MilliPerSeat
}

// MemberChange is a member's new state, or its removal, as the projection stores it.
type MemberChange struct {
	Workspace string
	Username  string
	Email     string
	Role      Role
	Disabled  bool
	Removed   bool
}

// Validate checks a change that came from a client (CheckSeatCap). It returns the offending
// field name and rule with the error.
func (c MemberChange) Validate() (field, rule string, err error) {
	if c.Workspace == "" {
		return "workspace", "required", errors.New("workspace is required")
	}
	if c.Username == "" {
		return "username", "required", errors.New("username is required")
	}
	if c.Removed {
		return "", "", nil
	}
	if c.Email == "" {
		return "email", "required", errors.New("email is required")
	}
	if _, err := ParseRole(string(c.Role)); err != nil {
		return "role", "enum", errors.New("role must be admin, developer or operator")
	}
	return "", "", nil
}

// BuilderChange sets a workspace's builder flag.
type BuilderChange struct {
	Workspace string
	Builder   bool
}

// WorkspaceRemoved drops every member and the settings of a workspace.
type WorkspaceRemoved struct {
	Workspace string
}

// Snapshot is policy's full state as of one stream position, for a resync.
type Snapshot struct {
	Position int64
	Members  []MemberChange
	Builders []BuilderChange
}
