package stream

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// WatchRequest is every service's WatchRequest (the generated getters).
type WatchRequest interface {
	GetAfterId() int64
	GetKinds() []string
}

// ServeWatch is the one implementation of every service's EventService.Watch
// (millwright.policy.v1, roleset.v1, billing.v1: the same messages in three packages, kept so
// that each service's route and clients stay as they are, see docs/design.md). allow decides
// the caller first: who may follow a stream is each service's rule. Then every event of s
// after req's after_id and of req's kinds is sent, each as a Resp with its event and head_id
// set, from the table and then live (Stream.Watch). A nil s is Unavailable.
//
// A handler is one line:
//
//	func (h *events) Watch(req *policyv1.WatchRequest, srv policyv1.EventService_WatchServer) error {
//		return stream.ServeWatch(h.stream, req, srv, h.allowWatch)
//	}
func ServeWatch[Resp any, PResp interface {
	*Resp
	proto.Message
}](s *Stream, req WatchRequest, srv grpc.ServerStreamingServer[Resp], allow func(context.Context) error) error {
	ctx := srv.Context()
	if err := allow(ctx); err != nil {
		return err
	}
	if s == nil {
		return errs.Unavailable("stream", "stream not running")
	}
	var zero Resp
	event, head, err := watchResponseFields(PResp(&zero).ProtoReflect().Descriptor())
	if err != nil {
		return err
	}
	return s.Watch(ctx, req.GetAfterId(), req.GetKinds(), func(e *Event, headID int64) error {
		var resp Resp
		m := PResp(&resp).ProtoReflect()
		if e != nil { // a heartbeat carries the head only
			m.Set(event, protoreflect.ValueOfMessage(ToProto(e).ProtoReflect()))
		}
		m.Set(head, protoreflect.ValueOfInt64(headID))
		return srv.Send(&resp)
	})
}

// watchResponseFields finds a WatchResponse's fields: event (millwright.common.v1.Event) and
// head_id (int64). A message without them is a programming error, reported as one.
func watchResponseFields(d protoreflect.MessageDescriptor) (event, head protoreflect.FieldDescriptor, err error) {
	event, head = d.Fields().ByName("event"), d.Fields().ByName("head_id")
	want := (&commonv1.Event{}).ProtoReflect().Descriptor().FullName()
	if event == nil || event.Message() == nil || event.Message().FullName() != want ||
		head == nil || head.Kind() != protoreflect.Int64Kind {
		return nil, nil, fmt.Errorf("stream: %s is not a WatchResponse (event %s, int64 head_id)", d.FullName(), want)
	}
	return event, head, nil
}
