package audit

import (
	"reflect"
	"testing"
	"time"
)

// The repeat window's key is exact: events that differ in any field of the decision have
// different keys, events that differ only in the fields of the call (times, count, seq, ids)
// share one. A new field of Event fails here until it is put in the key or listed as left out.
func TestDecisionKeyCoversEveryField(t *testing.T) {
	leftOut := map[string]bool{"Seq": true, "Time": true, "LastTime": true, "Count": true, "RequestID": true, "TraceID": true}
	base := Event{Service: "s", Replica: "r", RPC: "/p.S/M", Class: Credential, Outcome: Granted, Code: "OK", Rule: "x",
		Pointer: "/a", ActorKind: "job", Actor: "j", Workspace: "w", OnBehalfOf: "o", Object: "k=v", Details: map[string]string{"a": "1", "b": "2"}}
	key := func(e Event) string { return string(e.appendDecisionKey(nil)) }
	typ := reflect.TypeFor[Event]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			e := base
			e.Details = map[string]string{"a": "1", "b": "2"}
			v := reflect.ValueOf(&e).Elem().Field(i)
			switch f.Type {
			case reflect.TypeFor[string](), reflect.TypeFor[Class]():
				v.SetString(v.String() + "x")
			case reflect.TypeFor[int64]():
				v.SetInt(v.Int() + 1)
			case reflect.TypeFor[time.Time]():
				v.Set(reflect.ValueOf(time.Unix(1, 0)))
			case reflect.TypeFor[map[string]string]():
				e.Details["b"] = "3"
			default:
				t.Fatalf("field %s of type %s: teach appendDecisionKey and this test about it", f.Name, f.Type)
			}
			if leftOut[f.Name] {
				if key(e) != key(base) {
					t.Errorf("%s is a field of the call, not of the decision: it must not change the key", f.Name)
				}
			} else if key(e) == key(base) {
				t.Errorf("%s is part of the decision: it must change the key", f.Name)
			}
		})
	}
	// Length prefixes: moving a character from one field to the next is another decision.
	a, b := base, base
	a.Actor, a.Workspace = "ab", "c"
	b.Actor, b.Workspace = "a", "bc"
	if key(a) == key(b) {
		t.Error("fields must not run into each other")
	}
	c, d := base, base
	c.Details, d.Details = map[string]string{"ab": "c"}, map[string]string{"a": "bc"}
	if key(c) == key(d) {
		t.Error("details must not run into each other")
	}
}

// The warm path of a repeat allocates nothing for its key.
func TestDecisionKeyAllocations(t *testing.T) {
	e := Event{RPC: "/p.S/M", Class: Credential, Outcome: Granted, Details: map[string]string{"login": "l", "roles": "a,b", "kind": "ROLE"}}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf = e.appendDecisionKey(buf[:0]) }); n != 0 {
		t.Errorf("%v allocations per key", n)
	}
}
