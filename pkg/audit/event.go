package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"slices"
	"time"
)

// Class is the kind of decision an event records; fail-closed is chosen per class.
type Class string

// The classes (docs/audit.md lists the RPCs of each).
const (
	Credential Class = "credential" // a credential issued or refused: a connection, a token, a job token
	Token      Class = "token"      // a token revoked
	Builder    Class = "builder"    // builder checks: a flow, an app, a preview, a deploy
	Operator   Class = "operator"   // whether an operator may build
	Seats      Class = "seats"      // seat-cap checks and seat pricing
	Settings   Class = "settings"   // workspace settings changed
	Change     Class = "change"     // members, groups, folders, catalog, roles, data tables, permissions
	Run        Class = "run"        // a run finished
	Proxy      Class = "proxy"      // a proxy session started or ended
)

// Classes lists every class, for flags and tests.
var Classes = []Class{Credential, Token, Builder, Operator, Seats, Settings, Change, Run, Proxy}

// ClassOf returns the class named s; false for a name that is not one (refused by the flag
// and the filters, never taken as none).
func ClassOf(s string) (Class, bool) {
	i := slices.Index(Classes, Class(s))
	return Class(s), i >= 0
}

// Outcomes.
const (
	Granted = "granted"
	Refused = "refused"
	Failed  = "failed" // the service could not decide (unavailable, internal)
	// Requested is the event a fail-closed change writes before it is made: if even that
	// write fails, the change is refused; the outcome follows as its own event.
	Requested = "requested"
)

// Event is one decision. Its JSON form (Body) is what the chain hashes: change a field and the
// hash no longer matches.
type Event struct {
	Seq        int64             `json:"seq"`
	Time       time.Time         `json:"time"`
	LastTime   time.Time         `json:"last_time"`
	Count      int64             `json:"count"`
	Service    string            `json:"service"`
	Replica    string            `json:"replica"`
	RPC        string            `json:"rpc"`
	Class      Class             `json:"class"`
	Outcome    string            `json:"outcome"`
	Code       string            `json:"code"`
	Rule       string            `json:"rule,omitempty"`
	Pointer    string            `json:"pointer,omitempty"`
	ActorKind  string            `json:"actor_kind"`
	Actor      string            `json:"actor,omitempty"`
	Workspace  string            `json:"workspace,omitempty"`
	OnBehalfOf string            `json:"on_behalf_of,omitempty"`
	Object     string            `json:"object,omitempty"`
	Details    map[string]string `json:"details,omitempty"`
	RequestID  string            `json:"request_id,omitempty"`
	TraceID    string            `json:"trace_id,omitempty"`
}

// Body is the event's canonical JSON: struct fields in declaration order, map keys sorted
// (encoding/json), times in UTC with nanoseconds. Decoding a body and encoding it again gives
// the same bytes.
func (e Event) Body() []byte {
	e.Time, e.LastTime = e.Time.UTC(), e.LastTime.UTC()
	b, _ := json.Marshal(e) // only strings, ints, times and a string map: cannot fail
	return b
}

// ChainHash is the hash of an event whose body is body, after the event whose hash is prev.
func ChainHash(prev, body []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(body)
	return h.Sum(nil)
}

// Genesis is the prev hash of the first event of a trail.
var Genesis = make([]byte, sha256.Size)

// appendDecisionKey appends to b the key of identical decisions for the repeat window: every
// field but the times, the count, the seq and the ids of the call, each length-prefixed, the
// details sorted by key. Exact (two different decisions never share a key, as a hash could)
// and cheap on the warm path: no JSON, no hash, and no allocation beyond b's growth for up to
// 16 details. TestDecisionKeyCoversEveryField fails when a field of Event is neither in the
// key nor listed as left out.
func (e *Event) appendDecisionKey(b []byte) []byte {
	for _, s := range [...]string{e.Service, e.Replica, e.RPC, string(e.Class), e.Outcome, e.Code, e.Rule, e.Pointer,
		e.ActorKind, e.Actor, e.Workspace, e.OnBehalfOf, e.Object} {
		b = appendField(b, s)
	}
	keys := make([]string, 0, 16)
	for k := range e.Details {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendField(appendField(b, k), e.Details[k])
	}
	return b
}

func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
