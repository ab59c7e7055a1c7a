package api

import (
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
)

type eventServer struct {
	policyv1.UnimplementedEventServiceServer
	h *handlers
}

func (s *eventServer) Watch(req *policyv1.WatchRequest, srv policyv1.EventService_WatchServer) error {
	if _, err := s.h.authorize(srv.Context(), ""); err != nil {
		return err
	}
	return s.h.Stream.Watch(srv.Context(), req.GetAfterId(), req.GetKinds(), func(e *stream.Event, head int64) error {
		return srv.Send(&policyv1.WatchResponse{Event: stream.ToProto(e), HeadId: head})
	})
}
