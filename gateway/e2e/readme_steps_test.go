package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeSteps is what each README walkthrough block must print, in README order. A block added
// to the README without a line here fails the test (the counts differ).
func readmeSteps() []readmeStep {
	return []readmeStep{
		{heading: "Two viewers", check: func(t *testing.T, out string) error {
			var tickets []string
			for _, m := range regexp.MustCompile(`"user": *"(t_[a-z2-7]{26})"`).FindAllStringSubmatch(out, -1) {
				tickets = append(tickets, m[1])
			}
			if len(tickets) != 2 || tickets[0] == tickets[1] {
				return fmt.Errorf("want two distinct tickets as the users, got %v", tickets)
			}
			if n := strings.Count(out, `"CREDENTIAL_MODE_PROXY"`); n != 2 {
				return fmt.Errorf("want two CREDENTIAL_MODE_PROXY answers, got %d", n)
			}
			logins := regexp.MustCompile(`(?m)^sales_[a-z]+$`).FindAllString(out, -1)
			if want := []string{"sales_emea", "sales_apac"}; !slices.Equal(logins, want) {
				return fmt.Errorf("upstream logins (alice's, bob's) = %v, want %v", logins, want)
			}
			if n := strings.Count(out, `"CONNECTION_KIND_ROLE"`); n != 2 {
				return fmt.Errorf("want two CONNECTION_KIND_ROLE answers, got %d", n)
			}
			want := []string{"emea/bolts", "emea/nuts", "apac/gears", "apac/springs"}
			if got := rowsOf(out); !slices.Equal(got, want) {
				return fmt.Errorf("rows (alice's, then bob's) = %v, want %v", got, want)
			}
			if strings.Contains(out, "password") {
				return fmt.Errorf("the walkthrough should not print the password")
			}
			return nil
		}},
		{heading: "An operator's flow, builder rights off", fails: true, check: func(t *testing.T, out string) error {
			return cliRefusal(out, "PermissionDenied", "ERROR_REASON_BUILDER_RIGHTS_OFF", "")
		}},
		{heading: "Turn builder rights on", check: func(t *testing.T, out string) error {
			return cliFieldsAre(out, map[string]string{"before.seats": "3", "after.seats": "4", "delta_milliseats": "1000",
				"allowed": "true", "cap_seats": "0"})
		}},
		{heading: "Turn builder rights on", check: func(t *testing.T, out string) error {
			return cliFieldsAre(out, map[string]string{"settings.builder": "true"})
		}},
		// retry: the builder flag is cached per process and dropped by the settings event, which
		// reaches the cache a few milliseconds after the write (docs/policy.md).
		{heading: "Turn builder rights on", retry: true, check: func(t *testing.T, out string) error {
			check, register, ok := strings.Cut(out, "\n{")
			if !ok {
				return fmt.Errorf("want the check, then RegisterFlow's JSON answer: %q", out)
			}
			if err := cliFieldsAre(check, map[string]string{"role": "ROLE_OPERATOR"}); err != nil {
				return err
			}
			var got []string
			for _, m := range regexp.MustCompile(`(?m)^ *RUNNABLE_KIND_SCRIPT +(\S+) +(\S+)$`).FindAllStringSubmatch(check, -1) {
				got = append(got, m[1]+"@"+m[2])
			}
			want := []string{"f/sales/fetch_orders@/modules/0/value", "f/sales/summarize@/modules/1/value"}
			if !slices.Equal(got, want) {
				return fmt.Errorf("runnables = %v, want %v", got, want)
			}
			if objs, err := jsonObjects("{" + register); err != nil || len(objs) != 1 || len(objs[0]) != 0 {
				return fmt.Errorf("RegisterFlow answered %q, want {} (%w)", register, err)
			}
			return nil
		}},
		{heading: "Code is still refused", fails: true, check: func(t *testing.T, out string) error {
			return cliRefusal(out, "PermissionDenied", "ERROR_REASON_INLINE_CODE", "/modules/0/value")
		}},
		{heading: "Code is still refused", fails: true, check: func(t *testing.T, out string) error {
			return refusal(out, 7, "ERROR_REASON_PATH_NOT_READABLE", "flow", "/modules/0/value")
		}},
		{heading: "Seat usage", retry: true, check: func(t *testing.T, out string) error {
			return cliFieldsAre(out, map[string]string{"usage.authors": "4", "usage.operators": "0", "usage.milliseats": "4000",
				"usage.seats": "4", "cap_seats": "0", "weights.author_milliseats": "1000", "weights.operator_milliseats": "500"})
		}},
		{heading: "Seat usage", check: func(t *testing.T, out string) error {
			if err := cliFieldsAre(out, map[string]string{"allowed": "true", "user": "sales_emea", "roles": "sales_emea"}); err != nil {
				return err
			}
			if !regexp.MustCompile(`(?m)^ +sales_emea +g/emea +TENANT: .* true$`).MatchString(out) {
				return fmt.Errorf("no trace line of sales_emea matched by g/emea in %q", out)
			}
			return nil
		}},
		{heading: "A ticket dies with its run", check: func(t *testing.T, out string) error {
			session, again, ok := strings.Cut(out, "the same ticket again:")
			if !ok {
				return fmt.Errorf("no second part in %q", out)
			}
			if !regexp.MustCompile(`(?m)^1$`).MatchString(session) {
				return fmt.Errorf("the session did not start: %q", session)
			}
			if strings.Contains(session, "still connected") {
				return fmt.Errorf("the session outlived its run: %q", session)
			}
			if !strings.Contains(again, "password authentication failed") {
				return fmt.Errorf("the ticket still logs in after the run ended: %q", again)
			}
			return nil
		}},
		{heading: "The audit trail", check: func(t *testing.T, out string) error {
			refused, rest, ok1 := strings.Cut(out, "issued:")
			issued, changed, ok2 := strings.Cut(rest, "changed:")
			if !ok1 || !ok2 {
				return fmt.Errorf("want three parts: %q", out)
			}
			for part, wants := range map[string][]string{
				refused: {`"outcome":"refused"`, `"pointer":"/modules/0/value"`},
				issued:  {`"login":"`, `"credential_mode":"`},
				changed: {`"actor":"ada"`, `builder`},
			} {
				for _, want := range wants {
					if !strings.Contains(part, want) {
						return fmt.Errorf("no %s in %q", want, part)
					}
				}
			}
			return nil
		}},
		{heading: "The audit trail", check: func(t *testing.T, out string) error {
			objs, err := jsonObjects(out)
			if err != nil || len(objs) != 3 {
				return fmt.Errorf("want three verdicts: %w", err)
			}
			if objs[0]["ok"] != true || objs[2]["ok"] != true {
				return fmt.Errorf("the chain does not verify before the edit or after putting it back: %v", objs)
			}
			if objs[1]["ok"] == true || objs[1]["first_bad_seq"] == nil || !strings.Contains(fmt.Sprint(objs[1]["problem"]), "edited") {
				return fmt.Errorf("the hand edit was not found: %v", objs[1])
			}
			return nil
		}},
	}
}

// cliFieldsAre checks the "name: value" lines of the CLI's output for people.
func cliFieldsAre(out string, want map[string]string) error {
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(\S+): +(.*)$`).FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s = %q, want %q, in:\n%s", k, got[k], v, out)
		}
	}
	return nil
}

// cliRefusal checks the CLI's refusal: the gRPC code, one ErrorInfo of reason and, when set,
// its pointer.
func cliRefusal(out, code, reason, pointer string) error {
	if !strings.Contains(out, "error: "+code+": ") {
		return fmt.Errorf("no %s error in %q", code, out)
	}
	if n := strings.Count(out, "  reason: "); n != 1 || !strings.Contains(out, "  reason: "+reason+"\n") {
		return fmt.Errorf("want one reason %s in %q", reason, out)
	}
	if pointer != "" && !strings.Contains(out, "    pointer: "+pointer+"\n") {
		return fmt.Errorf("no pointer %s in %q", pointer, out)
	}
	return nil
}

// refusal checks grpcurl's -format-error output: one status of code, whose only ErrorInfo has
// reason and, when doc is set, metadata doc and pointer.
func refusal(out string, code float64, reason, doc, pointer string) error {
	objs, err := jsonObjects(out)
	if err != nil || len(objs) != 1 {
		return fmt.Errorf("want one JSON status: %w", err)
	}
	if got := at(objs[0], "code"); got != code {
		return fmt.Errorf("code = %v, want %v", got, code)
	}
	details, _ := at(objs[0], "details").([]any)
	if len(details) != 1 {
		return fmt.Errorf("want one ErrorInfo, got %v", details)
	}
	d, _ := details[0].(map[string]any)
	if d["reason"] != reason {
		return fmt.Errorf("reason = %v, want %s", d["reason"], reason)
	}
	if doc != "" {
		if got := at(d, "metadata", "doc"); got != doc {
			return fmt.Errorf("doc = %v, want %s", got, doc)
		}
		if got := at(d, "metadata", "pointer"); got != pointer {
			return fmt.Errorf("pointer = %v, want %s", got, pointer)
		}
	}
	return nil
}
